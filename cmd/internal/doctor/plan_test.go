package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// line is a result's check and status, what the plan tests compare.
type line struct {
	Check  string
	Status Status
}

func lines(rs []Result) []line {
	out := make([]line, len(rs))
	for i, r := range rs {
		out[i] = line{r.Check, r.Status}
	}
	return out
}

var controllerConfig = Controller{EndpointDir: "/cluster/shared/ai/endpoints", OutputDir: "/etc/nginx/slurm-llm",
	StateDirs: []string{"/var/lib/slurm-llm/upstreams", "/var/lib/slurm-llm/front"}, AllowedOwners: []string{"slurm-llm"},
	FrontListen: "127.0.0.1:8090", NeedAccounts: true, Why: "[front.auth] slurm_accounts"}

// rhelHost is an RHEL 8 controller as the issue found it: SELinux
// enforcing without the boolean or the ports, the site copied to
// sites-enabled (which RHEL's nginx never reads), systemd 239.
func rhelHost() *fakeHost {
	unit := "[Service]\nProtectHostname=yes\nRestrictSUIDSGID=yes\nProtectClock=yes\n"
	return &fakeHost{
		cmds: map[string]Output{
			"getenforce":                          stdout("Enforcing\n"),
			"getsebool httpd_can_network_connect": stdout("httpd_can_network_connect --> off\n"),
			"semanage port -l":                    stdout(semanageRHEL8),
			"nginx -t":                            {Stderr: "nginx: the configuration file /etc/nginx/nginx.conf syntax is ok\n"},
			"nginx -T":                            stdout(dump(ConfFile{"/etc/nginx/nginx.conf", rhelMain})),
			"firewall-cmd --state":                stdout("running\n"),
			"firewall-cmd --get-default-zone":     stdout("public\n"),
			"firewall-cmd --list-all":             stdout(zonePublic("", "")),
			"munge --version":                     stdout("munge-0.5.13 (2017-09-26)\n"),
			"munge -n":                            stdout("MUNGE:x:\n"),
			"unmunge":                             stdout(unmungeOK),
			"scontrol --version":                  stdout("slurm 23.02.7\n"),
			"scontrol ping":                       stdout("Slurmctld(primary) at ctl is UP\n"),
			"sacctmgr -n -P show cluster":         stdout("vasp|10.77.0.1|6817|\n"),
			"systemctl --version":                 stdout("systemd 239 (239-82.el8_10.2)\n"),
		},
		files: map[string]string{"/usr/lib/systemd/system/llm-front.service": unit},
		entries: map[string]Entry{
			"/cluster/shared/ai/endpoints":            {IsDir: true, Mode: 0o777, Owner: "slurm-llm"},
			"/etc/nginx/slurm-llm":                    {IsDir: true, Mode: 0o755, Owner: "root"},
			"/etc/nginx/sites-enabled/slurm-llm.conf": {Mode: 0o644},
		},
	}
}

func TestCheckControllerRHEL(t *testing.T) {
	rs := CheckController(context.Background(), rhelHost().host(), controllerConfig)
	want := []line{
		{"selinux.mode", OK}, {"selinux.boolean", Fail}, {"selinux.ports", Fail},
		{"nginx.test", OK}, {"nginx.site", Fail}, {"nginx.front-site", Warn},
		{"firewall.ports", OK},
		{"munge.version", OK}, {"munge.credential", OK}, {"slurm.ctld", OK}, {"slurm.accounting", OK},
		{"dir.endpoint_dir", Fail}, {"dir.output_dir", OK}, {"dir.state_dir", OK}, {"dir.state_dir", OK},
		{"systemd.units", Warn},
	}
	if d := cmp.Diff(want, lines(rs)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if Ready(rs) {
		t.Error("ready with failures")
	}
	var out bytes.Buffer
	if err := Write(&out, rs, false); err != nil {
		t.Fatal(err)
	}
	for _, fix := range []string{"fix: setsebool -P httpd_can_network_connect 1",
		"semanage port -m -t http_port_t -p tcp 8080", "/etc/nginx/conf.d/", "chmod 0755 /cluster/shared/ai/endpoints",
		"ProtectHostname (llm-front.service)"} {
		if !strings.Contains(out.String(), fix) {
			t.Errorf("report does not name %q:\n%s", fix, out.String())
		}
	}
	t.Logf("the report:\n%s", out.String())
	if n := strings.Count(out.String(), "\n"); n != len(rs) {
		t.Errorf("%d lines for %d results", n, len(rs))
	}
}

func TestCheckControllerFixed(t *testing.T) {
	f := rhelHost()
	f.cmds["getsebool httpd_can_network_connect"] = stdout("httpd_can_network_connect --> on\n")
	f.cmds["semanage port -l"] = stdout(semanageRHEL8 + "http_port_t tcp 8088, 8081, 8080\n")
	site := ConfFile{"/etc/nginx/conf.d/slurm-llm.conf", siteText}
	front := ConfFile{"/etc/nginx/conf.d/slurm-llm-front.conf", "server {\n    listen 127.0.0.1:8088;\n}\n"}
	f.cmds["nginx -T"] = stdout(dump(ConfFile{"/etc/nginx/nginx.conf", rhelMain}, site, front))
	f.entries["/cluster/shared/ai/endpoints"] = Entry{IsDir: true, Mode: 0o755, Owner: "slurm-llm"}
	rs := CheckController(context.Background(), f.host(), controllerConfig)
	if !Ready(rs) {
		var out bytes.Buffer
		Write(&out, rs, false)
		t.Errorf("not ready:\n%s", out.String())
	}
	var out bytes.Buffer
	if err := Write(&out, rs, true); err != nil {
		t.Fatal(err)
	}
	var back []map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || len(back) != len(rs) || back[0]["status"] != "ok" {
		t.Errorf("json: %v %v", err, back)
	}
}

func TestCheckNode(t *testing.T) {
	f := &fakeHost{
		cmds: map[string]Output{
			"munge --version":    stdout("munge-0.5.15 (2022-09-29)\n"),
			"munge -n":           {Stderr: mungeDown, Err: errExit252},
			"scontrol --version": stdout("slurm 22.05.8\n"),
			"scontrol ping":      stdout("Slurmctld(primary) at ctl is UP\n"),
			"nft list ruleset":   stdout(""),
		},
		entries: map[string]Entry{
			"/cluster/shared/ai/endpoints": {IsDir: true, Mode: 0o755, Owner: "slurm-llm"},
			"/cluster/shared/ai/logs":      {IsDir: true, Mode: 0o777, Owner: "slurm-llm"},
		},
	}
	n := Node{EndpointDirs: []string{"/cluster/shared/ai/endpoints", "/cluster/shared/ai/endpoints"},
		LogDirs: []string{"/cluster/shared/ai/logs"}, HeadPorts: []int{8081, 8080}, RPCPorts: []int{50052}}
	rs := CheckNode(context.Background(), f.host(), n)
	want := []line{{"munge.version", OK}, {"munge.credential", Fail}, {"slurm.ctld", OK},
		{"firewall.ports", OK}, {"firewall.rpc", Warn}, {"dir.endpoint_dir", OK}, {"dir.log_dir", Fail}}
	if d := cmp.Diff(want, lines(rs)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	hasFix(t, rs[1], Fail, "systemctl enable --now munge")
}
