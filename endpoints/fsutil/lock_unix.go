//go:build unix

package fsutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockPoll is how often a busy lock is retried.
const lockPoll = 50 * time.Millisecond

// LockOption changes how Lock opens its lock file. The zero set of options
// opens it read-write.
type LockOption func(*lockOptions)

type lockOptions struct {
	flag int // os.O_RDWR or os.O_RDONLY
}

// ReadOnly opens the lock file read-only. flock needs no write access, so a
// lock file one account created (mode 0644) stays usable by another, such
// as root and a service account sharing a state directory. Not for NFS:
// there Linux emulates flock with POSIX locks, and an exclusive POSIX lock
// needs a file open for writing.
func ReadOnly() LockOption {
	return func(o *lockOptions) { o.flag = os.O_RDONLY }
}

// Lock takes an exclusive flock on path, creating the file (mode 0644) and
// its directory (0755) if absent, and waits for it until ctx ends, retrying
// every 50 ms. The returned func releases it. The kernel drops the lock of a
// process that dies, so a crash never leaves a stale lock.
func Lock(ctx context.Context, path string, opts ...LockOption) (func(), error) {
	o := lockOptions{flag: os.O_RDWR}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(path, o.flag|os.O_CREATE|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	tick := time.NewTicker(lockPoll)
	defer tick.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: held by another process: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}
