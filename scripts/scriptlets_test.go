package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestScriptletsByArgument runs the packages' scriptlets as rpm and dpkg
// call them (rpm: 1 install, 2 upgrade, 0 erase; dpkg: install, upgrade,
// configure, remove) with the commands they run replaced by recorders, and
// checks what each asked: accounts made only when getent finds none, the
// placeholders and daemon-reload after install, units stopped on erase and
// never on upgrade.
func TestScriptletsByArgument(t *testing.T) {
	systemd := false
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		systemd = true // the scriptlets ask systemctl only where systemd runs
	}
	withSystemd := func(calls ...string) []string {
		var out []string
		for _, c := range calls {
			if !strings.HasPrefix(c, "systemctl") || systemd {
				out = append(out, c)
			}
		}
		return out
	}
	tests := []struct {
		name, script, pkg, arg string
		accountsExist          bool
		want                   []string
	}{
		{name: "rpm install, controller", script: "preinstall", pkg: "controller", arg: "1",
			want: []string{"groupadd --system slurm-llm", "useradd slurm-llm", "groupadd --system llm-front", "useradd llm-front"}},
		{name: "deb install, node", script: "preinstall", pkg: "node", arg: "install",
			want: []string{"groupadd --system slurm-llm", "useradd slurm-llm"}},
		{name: "site accounts (LDAP) kept", script: "preinstall", pkg: "controller", arg: "2", accountsExist: true},
		{name: "rpm post install", script: "postinstall", pkg: "controller", arg: "1",
			want: withSystemd("llm-upstreams init --config /etc/slurm-llm/upstreams.toml", "systemctl daemon-reload")},
		{name: "deb configure", script: "postinstall", pkg: "controller", arg: "configure",
			want: withSystemd("llm-upstreams init --config /etc/slurm-llm/upstreams.toml", "systemctl daemon-reload")},
		{name: "node post install runs nothing", script: "postinstall", pkg: "node", arg: "1"},
		{name: "rpm erase stops units", script: "preremove", pkg: "controller", arg: "0",
			want: withSystemd("systemctl --no-reload disable --now llm-front.service llm-keeper.service llm-upstreams-watch.service llm-upstreams.timer llm-upstreams.service")},
		{name: "rpm upgrade leaves units", script: "preremove", pkg: "controller", arg: "1"},
		{name: "deb upgrade leaves units", script: "preremove", pkg: "controller", arg: "upgrade"},
		{name: "deb remove stops units", script: "preremove", pkg: "controller", arg: "remove",
			want: withSystemd("systemctl --no-reload disable --now llm-front.service llm-keeper.service llm-upstreams-watch.service llm-upstreams.timer llm-upstreams.service")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runScriptlet(t, tt.script, tt.pkg, tt.arg, tt.accountsExist)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s %s (%s): commands (-want +got):\n%s", tt.script, tt.arg, tt.pkg, d)
			}
		})
	}
}

// runScriptlet runs scripts/package/SCRIPT.sh ARG with recorders for the
// commands it may run first on PATH; it returns what they were asked (for
// useradd: its last argument, the account).
func runScriptlet(t *testing.T, script, pkg, arg string, accountsExist bool) []string {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	getent := "exit 2"
	if accountsExist {
		getent = "exit 0"
	}
	fakes := map[string]string{
		"getent":        getent,
		"groupadd":      `echo "groupadd $*" >>` + log,
		"useradd":       `for a; do last=$a; done; echo "useradd $last" >>` + log,
		"systemctl":     `echo "systemctl $*" >>` + log,
		"llm-upstreams": `echo "llm-upstreams $*" >>` + log,
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", filepath.Join("package", script+".sh"), arg)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "SLURM_LLM_PACKAGE=" + pkg}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", script, arg, err, out)
	}
	b, err := os.ReadFile(log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
