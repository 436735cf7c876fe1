package upstreams

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rawEvent encodes one inotify event as the kernel does (name NUL-padded).
func rawEvent(mask uint32, name string, pad int) []byte {
	var b bytes.Buffer
	nameLen := 0
	if name != "" || pad > 0 {
		nameLen = len(name) + pad
	}
	binary.Write(&b, binary.NativeEndian, syscall.InotifyEvent{Wd: 1, Mask: mask, Len: uint32(nameLen)})
	b.WriteString(name)
	b.Write(make([]byte, nameLen-len(name)))
	return b.Bytes()
}

func TestParseEvents(t *testing.T) {
	var buf []byte
	buf = append(buf, rawEvent(syscall.IN_MOVED_TO, "fast-1.json", 5)...)
	buf = append(buf, rawEvent(syscall.IN_CREATE, ".fast-1.json.tmp-1", 2)...)
	buf = append(buf, rawEvent(syscall.IN_DELETE_SELF, "", 0)...)
	buf = append(buf, rawEvent(syscall.IN_Q_OVERFLOW, "", 0)...)
	truncated := rawEvent(syscall.IN_DELETE, "reasoning-2.json", 4)
	buf = append(buf, truncated[:len(truncated)-3]...)
	got := parseEvents(buf)
	want := []string{"fast-1.json", ".fast-1.json.tmp-1", "", ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
