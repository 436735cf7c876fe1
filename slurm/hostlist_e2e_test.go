//go:build e2e

package slurm

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestExpandHostlistMatchesScontrol cross-checks ExpandHostlist against the
// real `scontrol show hostnames` (which needs no controller). Where scontrol
// prints "Invalid hostlist" we must fail too; inputs on which scontrol prints
// nonsense instead of failing ("a[1-2" gives "a]") are left out on purpose.
func TestExpandHostlistMatchesScontrol(t *testing.T) {
	inputs := []string{
		"node[1-3]", "vasp-[01-03]", "a[1,3-5]", "a[1-2],b3", "r[1-2]n[1-2]", "plain", "a,b",
		"a[09-11]", "a[8-10]", "a[001-3]", "a[1-003]", "a[099-100]", "a[1-2],a[1-2]", "a[1-3,2]",
		"a[1-2]-[3-4]", "a[1-2][3-4]", "[1-2]", "a1[2-3]", "x[0-0]", "x[00]", "a[1-2] , b",
		",a", "a,", "a[1-2],,b", "a[1-65536]",
		"a[1-3]b", "a[3-1]", "a[]", "a[x]", "a[1,,2]", "a[1-2]c[5,7]d", "a[[1]]", "a[1-2]]",
		"a[1-65537]", "a[1--3]", "a[1-2-3]", "a[0x1-0x3]", "a[1-3 ]", "node[1-3]:",
	}
	// Where the versions differ (scripts/FACTS-cluster.md): ours expands
	// text after a group as 24.11 does (22.05 refuses it), and refuses the
	// malformed brackets 24.11 prints back half-read (22.05 refuses them).
	newer := map[string][]string{"a[1-3]b": {"a1b", "a2b", "a3b"}, "a[1-2]c[5,7]d": {"a1c5d", "a1c7d", "a2c5d", "a2c7d"},
		"node[1-3]:": {"node1:", "node2:", "node3:"}}
	malformed := map[string]bool{"a[[1]]": true, "a[1-2]]": true}
	for _, in := range inputs {
		t.Run(in, func(t *testing.T) {
			want, wantErr := scontrolHostnames(t, in)
			got, err := ExpandHostlist(in)
			if exp, ok := newer[in]; ok {
				if d := cmp.Diff(exp, got); err != nil || d != "" {
					t.Fatalf("ExpandHostlist(%q) = %v, %v; want 24.11's expansion %v", in, got, err, exp)
				}
				if !wantErr && !cmp.Equal(want, got) {
					t.Errorf("scontrol expands %q to %v, 24.11 to %v", in, want, exp)
				}
				return
			}
			if malformed[in] {
				if err == nil {
					t.Errorf("ExpandHostlist(%q) = %v, want an error", in, got)
				}
				return
			}
			if (err != nil) != wantErr {
				t.Fatalf("ExpandHostlist(%q) error = %v, scontrol failed: %v", in, err, wantErr)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("ExpandHostlist(%q) differs from scontrol (-scontrol +ours):\n%s", in, d)
			}
		})
	}
}

// scontrolHostnames runs `scontrol show hostnames IN`; scontrol exits 0 even
// for an invalid hostlist, so failure is read from its output.
func scontrolHostnames(t *testing.T, in string) ([]string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "scontrol", "show", "hostnames", in).CombinedOutput()
	if err != nil {
		t.Fatalf("scontrol show hostnames %q: %v: %s", in, err, out)
	}
	text := string(out)
	if strings.Contains(text, "Invalid hostlist") || strings.Contains(text, "error:") {
		return nil, true
	}
	return strings.Fields(text), false
}
