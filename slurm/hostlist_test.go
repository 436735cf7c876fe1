package slurm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "range", in: "node[1-3]", want: []string{"node1", "node2", "node3"}},
		// Text after a group: Slurm 24.11's scontrol show hostnames (22.05 refuses).
		{name: "text after group", in: "a[1-3]b", want: []string{"a1b", "a2b", "a3b"}},
		{name: "text after second group", in: "a[1-2]c[5,7]d", want: []string{"a1c5d", "a1c7d", "a2c5d", "a2c7d"}},
		{name: "an IPoIB name", in: "gpu[01-02]-ib", want: []string{"gpu01-ib", "gpu02-ib"}},
		{name: "zero padding", in: "vasp-[01-03]", want: []string{"vasp-01", "vasp-02", "vasp-03"}},
		{name: "padding across a decade", in: "a[09-11]", want: []string{"a09", "a10", "a11"}},
		{name: "no padding across a decade", in: "a[8-10]", want: []string{"a8", "a9", "a10"}},
		{name: "padding from the first number only", in: "a[1-003]", want: []string{"a1", "a2", "a3"}},
		{name: "list and range", in: "a[1,3-5]", want: []string{"a1", "a3", "a4", "a5"}},
		{name: "several hostlists", in: "a[1-2],b3", want: []string{"a1", "a2", "b3"}},
		{name: "whitespace separates", in: "a[1-2] , b\tc", want: []string{"a1", "a2", "b", "c"}},
		{name: "two groups", in: "r[1-2]n[1-2]", want: []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{name: "adjacent groups", in: "a[1-2][3-4]", want: []string{"a13", "a14", "a23", "a24"}},
		{name: "text between groups", in: "a[1-2]-[3-4]", want: []string{"a1-3", "a1-4", "a2-3", "a2-4"}},
		{name: "plain name", in: "plain", want: []string{"plain"}},
		{name: "plain names", in: "a,b", want: []string{"a", "b"}},
		{name: "digits before the group", in: "a1[2-3]", want: []string{"a12", "a13"}},
		{name: "no prefix", in: "[1-2]", want: []string{"1", "2"}},
		{name: "single number", in: "a[5]", want: []string{"a5"}},
		{name: "zero", in: "x[0-0]", want: []string{"x0"}},
		{name: "padded zero", in: "x[00]", want: []string{"x00"}},
		{name: "duplicates kept", in: "a[1-3,2]", want: []string{"a1", "a2", "a3", "a2"}},
		{name: "empty items skipped", in: ",a[1-2],,b,", want: []string{"a1", "a2", "b"}},
		{name: "empty", in: "", want: nil},
		{name: "exactly the cap", in: fmt.Sprintf("a[1-%d]", MaxHosts), want: numbered("a", 1, MaxHosts)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExpandHostlist(tt.in)
			if err != nil {
				t.Fatalf("ExpandHostlist(%q): %v", tt.in, err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("ExpandHostlist(%q) (-want +got):\n%s", tt.in, d)
			}
		})
	}
}

func numbered(prefix string, lo, hi int) []string {
	var out []string
	for i := lo; i <= hi; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func TestExpandHostlistErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{name: "unclosed bracket", in: "a[1-2"},
		{name: "close without open", in: "a]"},
		{name: "extra close", in: "a[1-2]]"},
		{name: "nested", in: "a[[1]]"},
		{name: "empty brackets", in: "a[]"},
		{name: "reversed range", in: "a[3-1]"},
		{name: "open range", in: "a[1-]"},
		{name: "negative", in: "a[-1]"},
		{name: "double dash", in: "a[1--3]"},
		{name: "three ends", in: "a[1-2-3]"},
		{name: "empty list item", in: "a[1,,2]"},
		{name: "letters", in: "a[x]"},
		{name: "hex", in: "a[0x1-0x3]"},
		{name: "space in range", in: "a[1-3 ]"},
		{name: "plus sign", in: "a[+1-3]"},
		{name: "range over the cap", in: fmt.Sprintf("a[1-%d]", MaxHosts+1)},
		{name: "product over the cap", in: "a[1-300]b[1-300]"},
		{name: "list over the cap", in: fmt.Sprintf("a[1-%d],b", MaxHosts)},
		{name: "huge range", in: "a[0-999999999999999999]"},
		{name: "number too long", in: "a[1234567890123456789]"},
		{name: "name too long", in: strings.Repeat("x", MaxHostnameLen+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExpandHostlist(tt.in)
			if !errors.Is(err, ErrBadHostlist) {
				t.Fatalf("ExpandHostlist(%q) = %d hosts, %v; want ErrBadHostlist", tt.in, len(got), err)
			}
			if !strings.Contains(err.Error(), "expand hostlist") {
				t.Errorf("error %q does not name the operation", err)
			}
		})
	}
}

// FuzzExpandHostlist checks that no input panics or breaks the caps, and that
// a plain name (no brackets, commas or spaces) expands to itself.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[1-3]", "vasp-[01-03]", "a[1,3-5],b3", "r[1-2]n[1-2]", "a[1-2", "a]", "", "a[1-3]b", "x[00]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			if !errors.Is(err, ErrBadHostlist) {
				t.Fatalf("ExpandHostlist(%q): error %v does not wrap ErrBadHostlist", s, err)
			}
			return
		}
		if len(hosts) > MaxHosts {
			t.Fatalf("ExpandHostlist(%q) gave %d hosts, over the cap", s, len(hosts))
		}
		for _, h := range hosts {
			if h == "" || len(h) > MaxHostnameLen || strings.ContainsAny(h, "[], \t\n") {
				t.Fatalf("ExpandHostlist(%q) gave bad host %q", s, h)
			}
		}
		if s != "" && !strings.ContainsAny(s, "[], \t\n\r\v\f") && len(s) <= MaxHostnameLen {
			if d := cmp.Diff([]string{s}, hosts); d != "" {
				t.Fatalf("plain name %q did not expand to itself (-want +got):\n%s", s, d)
			}
		}
	})
}
