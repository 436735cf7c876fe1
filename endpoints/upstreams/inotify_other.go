//go:build !linux

package upstreams

import "errors"

// dirWatcher is Linux-only (inotify); elsewhere watch relies on its sweeps.
type dirWatcher struct{}

func watchDir(string, chan<- string) (*dirWatcher, error) {
	return nil, errors.New("directory events need Linux inotify; relying on sweeps")
}

// Close implements the Linux watcher's method.
func (*dirWatcher) Close() error { return nil }
