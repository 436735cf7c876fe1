package cli

import (
	"bytes"
	"flag"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPrintFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("config", "/etc/x.toml", "config file")
	fs.Bool("json", false, "print JSON")
	var out bytes.Buffer
	fs.SetOutput(&out)
	var b bytes.Buffer
	PrintFlags(&b, fs)
	want := "  --config string\n    \tconfig file (default \"/etc/x.toml\")\n  --json\n    \tprint JSON\n"
	if d := cmp.Diff(want, b.String()); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if fs.Output() != &out {
		t.Errorf("the flag set's output was not given back")
	}
	if d := cmp.Diff([]string{"--config", "--json"}, FlagNames(fs)); d != "" {
		t.Errorf("FlagNames (-want +got):\n%s", d)
	}
}
