package doctor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// frontDirectives are the newer directives llm-front.service sets.
var frontDirectives = []string{"NoNewPrivileges", "ProtectClock", "ProtectHostname", "ProtectKernelLogs", "ProtectProc", "RestrictSUIDSGID"}

func TestCheckSystemd(t *testing.T) {
	front := Unit{Name: "llm-front.service", Path: "/usr/lib/systemd/system/llm-front.service", Directives: frontDirectives}
	rhelVerified := front
	rhelVerified.Verified = true
	// RHEL 8's 239 has RestrictSUIDSGID backported, so verify does not
	// name it.
	rhelVerified.Unknown = []string{"ProtectClock", "ProtectHostname", "ProtectKernelLogs", "ProtectProc"}
	tests := []struct {
		name     string
		facts    Systemd
		want     Status
		named    []string
		notNamed []string
	}{
		{name: "239 by the version table lists all five", facts: Systemd{Version: 239, Units: []Unit{front}}, want: Warn,
			named: []string{"ProtectClock", "ProtectHostname", "ProtectKernelLogs", "ProtectProc", "RestrictSUIDSGID", "NEWS"}},
		{name: "239 verified: what the host's parser refused", facts: Systemd{Version: 239, Units: []Unit{rhelVerified}}, want: Warn,
			named: []string{"ProtectClock (llm-front.service)", "systemd-analyze verify"}, notNamed: []string{"RestrictSUIDSGID"}},
		{name: "244 by the table", facts: Systemd{Version: 244, Units: []Unit{front}}, want: Warn,
			named: []string{"ProtectClock", "ProtectProc"}, notNamed: []string{"ProtectKernelLogs", "ProtectHostname"}},
		{name: "252 knows all", facts: Systemd{Version: 252, Units: []Unit{front}}, want: OK},
		{name: "no units installed", facts: Systemd{Version: 252}, want: Warn, named: []string{"install the package"}},
		{name: "no systemd", facts: Systemd{Missing: true}, want: Warn},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := CheckSystemd(tt.facts)
			hasFix(t, r, tt.want)
			for _, s := range tt.named {
				if !strings.Contains(r.What+r.Fix, s) {
					t.Errorf("%q not named: %+v", s, r)
				}
			}
			for _, s := range tt.notNamed {
				if strings.Contains(r.What, s) {
					t.Errorf("%q named: %+v", s, r)
				}
			}
		})
	}
}

func TestUnknownKeys(t *testing.T) {
	// 239 (RHEL 8, as its journal prints it), 245-ish and 252's forms.
	out := `/usr/lib/systemd/system/llm-front.service:57: Unknown lvalue 'ProtectHostname' in section 'Service'
/usr/lib/systemd/system/llm-front.service:58: Unknown key name 'ProtectClock' in section 'Service', ignoring.
/etc/systemd/system/llm-front.service:66: Unknown key 'ProtectProc' in section [Service], ignoring.
llm-front.service: Command /usr/bin/llm-upstreams is not executable: No such file or directory`
	if d := cmp.Diff([]string{"ProtectClock", "ProtectHostname", "ProtectProc"}, unknownKeys(out)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestGatherSystemd(t *testing.T) {
	unit := "[Unit]\nDescription=x\n[Service]\n# ProtectFoo=yes\nExecStart=/usr/bin/llm-upstreams front\nProtectClock=yes\nRestrictSUIDSGID=yes\n"
	f := &fakeHost{
		cmds: map[string]Output{
			"systemctl --version": stdout("systemd 239 (239-82.el8_10.2)\n+PAM +AUDIT +SELINUX\n"),
			"systemd-analyze verify /usr/lib/systemd/system/llm-front.service": {
				Stderr: "/usr/lib/systemd/system/llm-front.service:6: Unknown lvalue 'ProtectClock' in section 'Service'\n", Err: errExit252},
		},
		files: map[string]string{"/usr/lib/systemd/system/llm-front.service": unit, "/etc/systemd/system/llm-upstreams.timer": "[Timer]\nOnBootSec=1min\n"},
	}
	got := GatherSystemd(context.Background(), f.host())
	want := Systemd{Version: 239, Units: []Unit{
		{Name: "llm-front.service", Path: "/usr/lib/systemd/system/llm-front.service",
			Directives: []string{"Description", "ExecStart", "ProtectClock", "RestrictSUIDSGID"}, Verified: true, Unknown: []string{"ProtectClock"}},
		{Name: "llm-upstreams.timer", Path: "/etc/systemd/system/llm-upstreams.timer", Directives: []string{"OnBootSec"}},
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// knownAt239 are the directives the shipped units use that RHEL 8's
// systemd 239 parses (read in its load-fragment-gperf.gperf.m4,
// redhat-plumbers/systemd-rhel8), besides those in Introduced.
var knownAt239 = []string{"AccuracySec", "After", "AmbientCapabilities", "CapabilityBoundingSet", "Description",
	"Documentation", "ExecReload", "ExecStart", "Group", "KillSignal", "LimitNOFILE", "LockPersonality",
	"MemoryDenyWriteExecute", "NoNewPrivileges", "NotifyAccess", "OnBootSec", "OnUnitActiveSec", "PrivateDevices",
	"PrivateTmp", "ProtectControlGroups", "ProtectHome", "ProtectKernelModules", "ProtectKernelTunables",
	"ProtectSystem", "ReadWritePaths", "Restart", "RestartSec", "RestrictAddressFamilies", "RestrictNamespaces",
	"RestrictRealtime", "RuntimeDirectory", "RuntimeDirectoryPreserve", "StateDirectory", "StateDirectoryMode",
	"SystemCallArchitectures", "SystemCallFilter", "TimeoutStartSec", "TimeoutStopSec", "Type", "UMask", "User",
	"WantedBy", "Wants", "WatchdogSec", "WorkingDirectory", "EnvironmentFile", "Environment"}

// TestShippedUnitsKnown: a directive added to a shipped unit must be
// known at 239 or listed in Introduced with its version, else the
// doctor would not say that RHEL 8 ignores it.
func TestShippedUnitsKnown(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("..", "..", "..", "etc", "systemd", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no shipped units: %v", err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range unitDirectives(string(b)) {
			if _, newer := Introduced[d]; !newer && !slices.Contains(knownAt239, d) {
				t.Errorf("%s: %s is neither known at systemd 239 nor in Introduced", filepath.Base(p), d)
			}
		}
		if !slices.Contains(Units, filepath.Base(p)) {
			t.Errorf("%s is shipped but not in Units", filepath.Base(p))
		}
	}
}
