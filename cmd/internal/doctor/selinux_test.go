package doctor

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// semanageRHEL8 is `semanage port -l` on an RHEL 8 host as shipped
// (the lines that matter; 8080 is http_cache_port_t there).
const semanageRHEL8 = `SELinux Port Type              Proto    Port Number

http_cache_port_t              tcp      8080, 8118, 8123, 10001-10010
http_cache_port_t              udp      3130
http_port_t                    tcp      80, 81, 443, 488, 8008, 8009, 8443, 9000
ssh_port_t                     tcp      22
`

func TestParseSemanagePorts(t *testing.T) {
	got := parseSemanagePorts(semanageRHEL8)
	want := map[int][]string{8080: {"http_cache_port_t"}, 10005: {"http_cache_port_t"}, 80: {"http_port_t"}, 22: {"ssh_port_t"}, 3130: nil}
	for port, types := range want {
		if d := cmp.Diff(types, got[port]); d != "" {
			t.Errorf("port %d (-want +got):\n%s", port, d)
		}
	}
}

func TestCheckSELinux(t *testing.T) {
	labels := parseSemanagePorts(semanageRHEL8)
	ports := []int{8080, 8081, 8088}
	tests := []struct {
		name          string
		facts         SELinux
		mode, boolean Status
		ports         Status
		boolFix, pFix []string
	}{
		{name: "not installed", facts: SELinux{}, mode: OK, boolean: OK, ports: OK},
		{name: "disabled", facts: SELinux{Mode: "Disabled"}, mode: OK, boolean: OK, ports: OK},
		{name: "enforcing without the boolean, ports unlabelled",
			facts: SELinux{Mode: "Enforcing", NetworkConnect: "off", PortTypes: labels},
			mode:  OK, boolean: Fail, ports: Fail,
			boolFix: []string{"setsebool -P httpd_can_network_connect 1"},
			pFix: []string{"semanage port -m -t http_port_t -p tcp 8080", "semanage port -a -t http_port_t -p tcp 8081",
				"semanage port -a -t http_port_t -p tcp 8088"}},
		{name: "enforcing and fixed",
			facts: SELinux{Mode: "Enforcing", NetworkConnect: "on",
				PortTypes: map[int][]string{8080: {"http_cache_port_t", "http_port_t"}, 8081: {"http_port_t"}, 8088: {"http_port_t"}}},
			mode: OK, boolean: OK, ports: OK},
		{name: "permissive: what enforcing would deny, as warnings",
			facts: SELinux{Mode: "Permissive", NetworkConnect: "off", PortTypes: labels},
			mode:  Warn, boolean: Warn, ports: Warn,
			boolFix: []string{"setsebool -P httpd_can_network_connect 1"}, pFix: []string{"semanage port -a -t http_port_t -p tcp 8088"}},
		{name: "enforcing, no semanage: unknown, not a pass",
			facts: SELinux{Mode: "Enforcing", NetworkConnect: "on", PortsErr: "semanage is not installed"},
			mode:  OK, boolean: OK, ports: Warn, pFix: []string{"policycoreutils-python-utils"}},
		{name: "enforcing, getsebool silent",
			facts: SELinux{Mode: "Enforcing", PortTypes: labels}, mode: OK, boolean: Warn, ports: Fail,
			boolFix: []string{"getsebool httpd_can_network_connect"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hasFix(t, CheckSELinuxMode(tt.facts), tt.mode)
			hasFix(t, CheckSELinuxBoolean(tt.facts), tt.boolean, tt.boolFix...)
			hasFix(t, CheckSELinuxPorts(tt.facts, ports), tt.ports, tt.pFix...)
		})
	}
}

func TestGatherSELinux(t *testing.T) {
	tests := []struct {
		name string
		cmds map[string]Output
		want SELinux
	}{
		{name: "no getenforce", want: SELinux{}},
		{name: "disabled asks nothing more", cmds: map[string]Output{"getenforce": stdout("Disabled\n")},
			want: SELinux{Mode: "Disabled"}},
		{name: "enforcing, boolean off, no semanage", cmds: map[string]Output{
			"getenforce":                          stdout("Enforcing\n"),
			"getsebool httpd_can_network_connect": stdout("httpd_can_network_connect --> off\n")},
			want: SELinux{Mode: "Enforcing", NetworkConnect: "off", PortsErr: "semanage is not installed"}},
		{name: "semanage fails", cmds: map[string]Output{
			"getenforce":       stdout("Permissive\n"),
			"semanage port -l": exit1("ValueError: SELinux policy is not managed or store cannot be accessed.\n")},
			want: SELinux{Mode: "Permissive", PortsErr: "ValueError: SELinux policy is not managed or store cannot be accessed."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeHost{cmds: tt.cmds}
			if d := cmp.Diff(tt.want, GatherSELinux(context.Background(), f.host())); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
