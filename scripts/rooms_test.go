package scripts

import (
	"os/exec"
	"strings"
	"testing"
)

// TestControllerRooms keeps the controller's rooms apart (README's
// package map): the core (endpoints/tiers) imports no consumer of its
// passes, the front door never imports nginx, and access imports no
// controller room. A new import across these lines fails here, naming it.
func TestControllerRooms(t *testing.T) {
	const mod = "slurm-llm/endpoints/"
	for _, c := range []struct {
		room   string
		forbid []string
	}{
		{"tiers", []string{"nginx", "front", "access"}},
		{"front", []string{"nginx"}},
		{"access", []string{"tiers", "nginx", "front", "keeper", "config"}},
		{"keeper", []string{"tiers", "nginx", "front", "access", "config"}},
		{"nginx", []string{"front", "access"}},
	} {
		out, err := exec.Command("go", "list", "-deps", "../endpoints/"+c.room).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", c.room, err, out)
		}
		deps := strings.Fields(string(out))
		for _, f := range c.forbid {
			for _, d := range deps {
				if d == mod+f || strings.HasPrefix(d, mod+f+"/") {
					t.Errorf("endpoints/%s imports %s (directly or not)", c.room, d)
				}
			}
		}
	}
}
