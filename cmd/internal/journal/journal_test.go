package journal

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

func TestWriterPrefixesEachLine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes func(w *Writer)
		want   string
	}{
		{"levels", func(w *Writer) {
			w.LevelWrite(hclog.Trace, []byte("t\n"))
			w.LevelWrite(hclog.Debug, []byte("d\n"))
			w.LevelWrite(hclog.Info, []byte("i\n"))
			w.LevelWrite(hclog.Warn, []byte("w\n"))
			w.LevelWrite(hclog.Error, []byte("e\n"))
		}, "<7>t\n<7>d\n<6>i\n<4>w\n<3>e\n"},
		{"plain writes are info", func(w *Writer) { w.Write([]byte("a\nb\n")) }, "<6>a\n<6>b\n"},
		{"an entry's every line", func(w *Writer) {
			w.LevelWrite(hclog.Error, []byte("msg: out=\n  | line 1\n  | line 2\n"))
		}, "<3>msg: out=\n<3>  | line 1\n<3>  | line 2\n"},
		{"a line in pieces gets one prefix", func(w *Writer) {
			w.Write([]byte("GET "))
			w.Write([]byte("/v1 200\nnext"))
			w.Write([]byte(" line\n"))
		}, "<6>GET /v1 200\n<6>next line\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tc.writes(NewWriter(&b, PriorityInfo))
			if d := cmp.Diff(tc.want, b.String()); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// An hclog logger writing through a Writer: each entry's priority is its
// level's, in text and in JSON, and the text after the prefix is as
// before.
func TestHclogThroughWriter(t *testing.T) {
	for _, json := range []bool{false, true} {
		var b bytes.Buffer
		log := hclog.New(&hclog.LoggerOptions{Name: "x", Output: NewWriter(&b, PriorityInfo), Level: hclog.Debug, JSONFormat: json})
		log.Debug("probe", "n", 1)
		log.Info("ready")
		log.Named("sub").Warn("slow", "error", "late")
		log.Error("gave up", "error", "boom")
		var got []string
		for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
			got = append(got, line[:3])
			if json && !strings.HasPrefix(line[3:], "{") {
				t.Errorf("JSON line %q: not JSON after its prefix", line)
			}
		}
		if d := cmp.Diff([]string{"<7>", "<6>", "<4>", "<3>"}, got); d != "" {
			t.Errorf("json=%v: priorities (-want +got):\n%s\n%s", json, d, b.String())
		}
	}
}

func TestIsStream(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Fstat(int(os.Stderr.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	mine := fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	for _, tc := range []struct {
		name, env string
		w         any
		want      bool
	}{
		{"standard error is the journal's stream", mine, os.Stderr, true},
		{"no JOURNAL_STREAM", "", os.Stderr, false},
		{"inherited: another stream's", fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), os.Stderr, false},
		{"malformed", "journal", os.Stderr, false},
		{"not standard error", mine, &bytes.Buffer{}, false},
		{"standard output", mine, os.Stdout, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("JOURNAL_STREAM", tc.env)
			w := tc.w.(interface{ Write([]byte) (int, error) })
			if got := IsStream(w); got != tc.want {
				t.Errorf("IsStream = %v, want %v", got, tc.want)
			}
			_, wrapped := Wrap(w).(*Writer)
			if wrapped != tc.want {
				t.Errorf("Wrap wrapped = %v, want %v", wrapped, tc.want)
			}
		})
	}
}
