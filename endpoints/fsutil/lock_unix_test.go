//go:build unix

package fsutil

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLockExcludes(t *testing.T) {
	tests := []struct {
		name    string
		opts    []LockOption
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{name: "read-write, the wait ends at the deadline", wantErr: context.DeadlineExceeded,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 200*time.Millisecond)
			}},
		{name: "read-only, a cancelled context gives up at once", opts: []LockOption{ReadOnly()},
			wantErr: context.Canceled,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "sub", "lock")
			unlock, err := Lock(context.Background(), path, tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tt.ctx()
			defer cancel()
			if _, err := Lock(ctx, path, tt.opts...); !errors.Is(err, tt.wantErr) {
				t.Fatalf("second Lock while held = %v, want %v", err, tt.wantErr)
			}
			unlock()
			unlock2, err := Lock(context.Background(), path, tt.opts...)
			if err != nil {
				t.Fatalf("Lock after release: %v", err)
			}
			unlock2()
		})
	}
}

// A waiter blocked on a held lock takes it once the holder releases it.
func TestLockWaiterTakesReleasedLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		unlock2, err := Lock(context.Background(), path)
		if err == nil {
			unlock2()
		}
		got <- err
	}()
	unlock()
	if err := <-got; err != nil {
		t.Fatalf("waiting Lock: %v", err)
	}
}

// A lock file another account created (mode 0644, here 0444 so even its
// owner cannot write it) is usable read-only, not read-write.
func TestLockReadOnlyOpensUnwritableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes any file")
	}
	path := filepath.Join(t.TempDir(), "lock")
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(context.Background(), path); !errors.Is(err, os.ErrPermission) {
		t.Errorf("read-write Lock of a 0444 file = %v, want permission denied", err)
	}
	unlock, err := Lock(context.Background(), path, ReadOnly())
	if err != nil {
		t.Fatalf("read-only Lock of a 0444 file: %v", err)
	}
	unlock()
}

func TestLockBadDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(context.Background(), filepath.Join(file, "lock")); err == nil {
		t.Fatal("Lock under a regular file: no error")
	}
}
