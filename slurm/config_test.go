package slurm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// showConfig writes `scontrol show config` as every series from 20.11 to
// 25.11 prints it (slurm_print_ctl_conf and slurm_print_key_pairs,
// "%-23s = %s", src/api/config_info.c): a header, the controller's keys
// in name order (a name longer than 23 characters is not padded), then
// sections whose keys may repeat, then the controllers' states.
func showConfig(version, authInfo, schedParams string) string {
	var b strings.Builder
	b.WriteString("Configuration data as of 2026-11-27T10:00:00\n")
	for _, kv := range [][2]string{
		{"AccountingStorageBackupHost", "(null)"},
		{"AccountingStorageType", "accounting_storage/slurmdbd"},
		{"AuthInfo", authInfo},
		{"AuthType", "auth/munge"},
		{"ClusterName", "test"},
		{"SchedulerParameters", schedParams},
		{"SchedulerType", "sched/backfill"},
		{"SLURM_CONF", "/etc/slurm/slurm.conf"},
		{"SLURM_VERSION", version},
		{"SrunPortRange", "0-0"},
	} {
		fmt.Fprintf(&b, "%-23s = %s\n", kv[0], kv[1])
	}
	b.WriteString("\nCgroup Support Configuration:\n")
	fmt.Fprintf(&b, "%-23s = %s\n", "ClusterName", "not-this-one")
	fmt.Fprintf(&b, "%-23s = %s\n", "AllowedRAMSpace", "100.0%")
	b.WriteString("\nSlurmctld(primary) at head is UP\n")
	return b.String()
}

// TestConfigAcrossVersions reads each series' `scontrol show config` and
// the requeue hold it implies (slurm/FACTS.md V6): cred_expire= in
// AuthInfo to 25.05, SchedulerParameters requeue_delay= first from 25.11.
func TestConfigAcrossVersions(t *testing.T) {
	tests := []struct {
		name, version, authInfo, schedParams string
		want                                 time.Duration
	}{
		{name: "20.11, nothing set", version: "20.11.9", authInfo: "(null)", schedParams: "(null)", want: 120 * time.Second},
		{name: "22.05, cred_expire after another option", version: "22.05.8",
			authInfo: "socket=/run/munge/munge.socket.2,cred_expire=300", schedParams: "bf_interval=30", want: 300 * time.Second},
		{name: "23.11, cred_expire below 5 is the default", version: "23.11.11", authInfo: "cred_expire=3", schedParams: "(null)", want: 120 * time.Second},
		{name: "24.11, requeue_delay does not exist yet", version: "24.11.7", authInfo: "(null)",
			schedParams: "requeue_delay=600", want: 120 * time.Second},
		{name: "25.05, requeue_delay does not exist yet", version: "25.05.8", authInfo: "cred_expire=200",
			schedParams: "requeue_delay=600", want: 200 * time.Second},
		{name: "25.11, requeue_delay over cred_expire", version: "25.11.7", authInfo: "cred_expire=200",
			schedParams: "bf_interval=30,requeue_delay=600", want: 600 * time.Second},
		{name: "25.11, requeue_delay shorter than cred_expire", version: "25.11.0", authInfo: "cred_expire=200",
			schedParams: "requeue_delay=30", want: 30 * time.Second},
		{name: "25.11, requeue_delay empty: cred_expire", version: "25.11.7", authInfo: "cred_expire=200",
			schedParams: "requeue_delay=", want: 200 * time.Second},
		{name: "25.11, nothing set", version: "25.11.7", authInfo: "(null)", schedParams: "(null)", want: 120 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig(showConfig(tt.version, tt.authInfo, tt.schedParams))
			if err != nil {
				t.Fatal(err)
			}
			unset := func(s string) string { return strings.TrimPrefix(s, "(null)") }
			want := Config{ClusterName: "test", Version: tt.version, AuthInfo: unset(tt.authInfo), SchedulerParameters: unset(tt.schedParams)}
			if d := cmp.Diff(want, cfg); d != "" {
				t.Errorf("ParseConfig (-want +got):\n%s", d)
			}
			if got := cfg.RequeueDelay(); got != tt.want {
				t.Errorf("RequeueDelay = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestParseConfigRefusesOtherOutput(t *testing.T) {
	for _, out := range []string{"", "slurm_load_ctl_conf error: Unable to contact slurm controller\n",
		"ClusterName             = test\n"} {
		if _, err := ParseConfig(out); err == nil {
			t.Errorf("ParseConfig(%q): no error", out)
		}
	}
}

func TestClientConfig(t *testing.T) {
	var argv []string
	c := &Client{Scontrol: "/s/scontrol", Run: fakeRunner(t, reply{stdout: showConfig("22.05.8", "(null)", "(null)")}, &argv)}
	cfg, err := c.Config(context.Background())
	if err != nil || cfg.ClusterName != "test" {
		t.Errorf("Config = %+v, %v", cfg, err)
	}
	if d := cmp.Diff([]string{"/s/scontrol", "show", "config"}, argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
}
