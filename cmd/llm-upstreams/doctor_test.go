package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/cmd/internal/doctor"
	"slurm-llm/endpoints/config"
	"slurm-llm/endpoints/nginx"
	"slurm-llm/endpoints/tiers"
)

// The doctor checks the directories and ports the loaded config names,
// and asks for Slurm accounting only when the front door needs it.
func TestDoctorController(t *testing.T) {
	base := config.Config{Watcher: tiers.Config{EndpointDir: "/e", StateDir: "/var/lib/slurm-llm/upstreams",
		AllowedOwners: []string{"slurm-llm"}, HintListen: ":9466"}, Nginx: nginx.Config{OutputDir: "/etc/nginx/slurm-llm"}}
	withFront := func(mode string, accounts bool, weights string) config.Config {
		c := base
		c.Front.Listen, c.Front.StateDir, c.Front.HintListen = "127.0.0.1:8090", "/var/lib/slurm-llm/front", ""
		c.Front.Access.Auth.Mode, c.Front.Access.Auth.SlurmAccounts = mode, accounts
		c.Front.Access.FairShare.Enabled, c.Front.Access.FairShare.Weights = true, weights
		return c
	}
	anyOwner := base
	anyOwner.AllowAnyOwner, anyOwner.AllowedOwners = true, nil
	ctl := doctor.Controller{EndpointDir: "/e", OutputDir: "/etc/nginx/slurm-llm", StateDirs: []string{"/var/lib/slurm-llm/upstreams"},
		AllowedOwners: []string{"slurm-llm"}, HintListen: ":9466"}
	front := ctl
	front.StateDirs = []string{"/var/lib/slurm-llm/upstreams", "/var/lib/slurm-llm/front"}
	front.FrontListen = "127.0.0.1:8090"
	tests := []struct {
		name string
		cfg  config.Config
		want doctor.Controller
	}{
		{name: "no front door: no accounting needed", cfg: base, want: ctl},
		{name: "keys with accounts", cfg: withFront("identify", true, "equal"),
			want: with(front, func(c *doctor.Controller) { c.NeedAccounts, c.Why = true, "[front.auth] slurm_accounts" })},
		{name: "auth off, sshare weights", cfg: withFront("off", true, "sshare"),
			want: with(front, func(c *doctor.Controller) { c.NeedAccounts, c.Why = true, `[front.fair_share] weights = "sshare"` })},
		{name: "auth on without accounts, equal weights", cfg: withFront("identify", false, "equal"), want: front},
		{name: "any owner", cfg: anyOwner, want: with(ctl, func(c *doctor.Controller) { c.AllowedOwners = nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, doctorController(tt.cfg)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func with(c doctor.Controller, f func(*doctor.Controller)) doctor.Controller {
	f(&c)
	return c
}
