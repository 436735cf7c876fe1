package upstreams

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// dirEvents is the inotify mask of a watched endpoint dir: whatever can
// change which files exist or what they hold, once complete (a file written
// in place counts at close, not at every write), and the dir itself going.
const dirEvents = syscall.IN_CREATE | syscall.IN_CLOSE_WRITE | syscall.IN_MOVED_TO |
	syscall.IN_MOVED_FROM | syscall.IN_DELETE | syscall.IN_ATTRIB |
	syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF

// dirWatcher watches one directory with inotify (the standard library's,
// so the module needs no newer Go than go.mod names). Each event is sent
// to out as the base name of the file, or "" for the directory itself
// (removed, moved away, or the watch was dropped).
type dirWatcher struct {
	f    *os.File
	done chan struct{}
}

// watchDir starts watching dir; events go to out until Close.
func watchDir(dir string, out chan<- string) (*dirWatcher, error) {
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC | syscall.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify init: %w", err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, dirEvents|syscall.IN_ONLYDIR); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	// A non-blocking fd makes os.File use the runtime poller, so Close
	// wakes a pending Read.
	w := &dirWatcher{f: os.NewFile(uintptr(fd), "inotify:"+dir), done: make(chan struct{})}
	go w.read(out)
	return w, nil
}

// Close stops the watcher; no event is sent after it returns... except
// one already being handed over, which the receiver may ignore.
func (w *dirWatcher) Close() error {
	close(w.done)
	return w.f.Close()
}

// read decodes events until the file is closed.
func (w *dirWatcher) read(out chan<- string) {
	buf := make([]byte, 64*(syscall.SizeofInotifyEvent+syscall.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
				w.send(out, "")
			}
			return
		}
		for _, name := range parseEvents(buf[:n]) {
			if !w.send(out, name) {
				return
			}
		}
	}
}

// send hands one event over unless the watcher was closed.
func (w *dirWatcher) send(out chan<- string, name string) bool {
	select {
	case out <- name:
		return true
	case <-w.done:
		return false
	}
}

// parseEvents returns the names in a buffer of inotify events: "" for an
// event on the directory itself or a queue overflow (rescan everything).
func parseEvents(b []byte) []string {
	var names []string
	for len(b) >= syscall.SizeofInotifyEvent {
		ev := (*syscall.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := syscall.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			break
		}
		name := string(bytes.TrimRight(b[syscall.SizeofInotifyEvent:end], "\x00"))
		if ev.Mask&(syscall.IN_DELETE_SELF|syscall.IN_MOVE_SELF|syscall.IN_IGNORED|syscall.IN_Q_OVERFLOW) != 0 {
			name = ""
		}
		names = append(names, name)
		b = b[end:]
	}
	return names
}
