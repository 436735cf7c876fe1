package doctor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// rhelMain and debianMain are the parts of RHEL 8's (AppStream) and
// Debian 12's nginx.conf that say where sites go.
const rhelMain = `user nginx;
include /usr/share/nginx/modules/*.conf;
http {
    include             /etc/nginx/mime.types;
    # Load modular configuration files from the /etc/nginx/conf.d directory.
    include /etc/nginx/conf.d/*.conf;
}
`

const debianMain = `user www-data;
include /etc/nginx/modules-enabled/*.conf;
http {
	include /etc/nginx/mime.types;
	include /etc/nginx/conf.d/*.conf;
	include /etc/nginx/sites-enabled/*;
}
`

const siteText = `include /etc/nginx/slurm-llm/upstream-fast.conf;
server {
    listen 127.0.0.1:8080;
}
server {
    listen 127.0.0.1:8081;
}
`

// dump is nginx -T's output for these files, main first.
func dump(files ...ConfFile) string {
	var s string
	for _, f := range files {
		s += "# configuration file " + f.Path + ":\n" + f.Text + "\n"
	}
	return s
}

func TestParseDump(t *testing.T) {
	out := dump(ConfFile{"/etc/nginx/nginx.conf", rhelMain}, ConfFile{"/etc/nginx/conf.d/slurm-llm.conf", siteText})
	got := parseDump(out)
	want := []ConfFile{{"/etc/nginx/nginx.conf", rhelMain + "\n"}, {"/etc/nginx/conf.d/slurm-llm.conf", siteText + "\n"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestCheckNginx(t *testing.T) {
	rhel := ConfFile{"/etc/nginx/nginx.conf", rhelMain}
	deb := ConfFile{"/etc/nginx/nginx.conf", debianMain}
	tests := []struct {
		name      string
		facts     Nginx
		test      Status
		site      Status
		front     Status
		siteFix   []string
		wantDir   string
		wantPorts []Listen
	}{
		{name: "not installed", facts: Nginx{Missing: true}, test: Fail, site: Fail, front: Fail},
		{name: "RHEL: site not included", wantDir: "/etc/nginx/conf.d",
			facts: Nginx{TestOK: true, Files: []ConfFile{rhel}, Shipped: []string{"/usr/share/slurm-llm/etc/nginx/slurm-llm.conf"}},
			test:  OK, site: Fail, front: Warn, wantPorts: ShippedListens,
			siteFix: []string{"cp /usr/share/slurm-llm/etc/nginx/slurm-llm.conf /etc/nginx/conf.d/", "nginx -t"}},
		{name: "Debian: the package's site in sites-available, not linked", wantDir: "/etc/nginx/sites-enabled",
			facts: Nginx{TestOK: true, Files: []ConfFile{deb}, Shipped: []string{"/etc/nginx/sites-available/slurm-llm.conf"}},
			test:  OK, site: Fail, front: Warn, wantPorts: ShippedListens,
			siteFix: []string{"ln -s /etc/nginx/sites-available/slurm-llm.conf /etc/nginx/sites-enabled/"}},
		{name: "RHEL: included from conf.d, ports read from it", wantDir: "/etc/nginx/conf.d",
			facts: Nginx{TestOK: true, Files: []ConfFile{rhel, {"/etc/nginx/conf.d/slurm-llm.conf", siteText}}},
			test:  OK, site: OK, front: Warn, wantPorts: []Listen{{"127.0.0.1", 8080}, {"127.0.0.1", 8081}}},
		{name: "renamed site found by its includes",
			facts: Nginx{TestOK: true, Files: []ConfFile{deb, {"/etc/nginx/sites-enabled/llm", siteText}}},
			test:  OK, site: OK, front: Warn, wantDir: "/etc/nginx/sites-enabled", wantPorts: []Listen{{"127.0.0.1", 8080}, {"127.0.0.1", 8081}}},
		{name: "nginx -t fails: site unknown, the error named", wantDir: "/etc/nginx/conf.d",
			facts: Nginx{TestOut: "nginx: [emerg] open() \"/etc/nginx/slurm-llm/upstream-fast.conf\" failed (2: No such file or directory)\nnginx: configuration file /etc/nginx/nginx.conf test failed",
				MainConf: rhelMain},
			test: Fail, site: Warn, front: Warn, wantPorts: ShippedListens, siteFix: []string{"nginx -T"}},
		{name: "nginx.conf includes neither", wantDir: "",
			facts: Nginx{TestOK: true, Files: []ConfFile{{"/etc/nginx/nginx.conf", "http {\n}\n"}}},
			test:  OK, site: Fail, front: Warn, wantPorts: ShippedListens, siteFix: []string{"include /etc/nginx/conf.d/*.conf;"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := CheckNginxTest(tt.facts)
			hasFix(t, r, tt.test)
			if tt.test == Fail && !tt.facts.Missing && !cmp.Equal(r.What, "nginx -t fails: "+testError(tt.facts.TestOut)) {
				t.Errorf("what = %q", r.What)
			}
			hasFix(t, CheckNginxSite(tt.facts, SiteTiers, "/etc/nginx/slurm-llm", false), tt.site, tt.siteFix...)
			hasFix(t, CheckNginxSite(tt.facts, SiteFront, "/etc/nginx/slurm-llm", true), tt.front)
			if tt.facts.Missing {
				return
			}
			if got := tt.facts.SiteDir(); got != tt.wantDir {
				t.Errorf("SiteDir = %q, want %q", got, tt.wantDir)
			}
			if d := cmp.Diff(tt.wantPorts, tt.facts.SiteListens("/etc/nginx/slurm-llm", ShippedListens)); d != "" {
				t.Errorf("listens (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseListen(t *testing.T) {
	tests := []struct {
		in   string
		want Listen
		ok   bool
	}{
		{"127.0.0.1:8080", Listen{"127.0.0.1", 8080}, true},
		{"8080", Listen{"", 8080}, true},
		{"[::1]:8088", Listen{"::1", 8088}, true},
		{"*:80", Listen{"*", 80}, true},
		{"unix:/run/x.sock", Listen{}, false},
	}
	for _, tt := range tests {
		got, ok := parseListen(tt.in)
		if d := cmp.Diff(tt.want, got); d != "" || ok != tt.ok {
			t.Errorf("parseListen(%q) = %v, %v (-want +got):\n%s", tt.in, got, ok, d)
		}
	}
}

func TestGatherNginx(t *testing.T) {
	f := &fakeHost{
		cmds: map[string]Output{
			"nginx -t": {Stderr: "nginx: configuration file /etc/nginx/nginx.conf test is successful\n"},
			"nginx -T": stdout(dump(ConfFile{"/etc/nginx/nginx.conf", rhelMain})),
		},
		entries: map[string]Entry{"/etc/nginx/conf.d/slurm-llm.conf": {}},
	}
	got := GatherNginx(context.Background(), f.host())
	want := Nginx{TestOK: true, TestOut: "nginx: configuration file /etc/nginx/nginx.conf test is successful",
		Files: []ConfFile{{"/etc/nginx/nginx.conf", rhelMain + "\n"}}, Shipped: []string{"/etc/nginx/conf.d/slurm-llm.conf"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestShippedListens pins ShippedListens to the shipped sites' listen
// lines: a port changed in etc/nginx must change here too.
func TestShippedListens(t *testing.T) {
	var files []ConfFile
	for _, name := range []string{SiteTiers, SiteFront} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "etc", "nginx", name))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, ConfFile{"/etc/nginx/conf.d/" + name, string(b)})
	}
	n := Nginx{Files: append([]ConfFile{{"/etc/nginx/nginx.conf", rhelMain}}, files...)}
	if d := cmp.Diff(ShippedListens, n.SiteListens("/etc/nginx/slurm-llm", nil)); d != "" {
		t.Errorf("shipped sites' listens (-want +got):\n%s", d)
	}
}

// TestNginxCommand: the doctor asks the nginx the watcher tests, with the
// configuration [nginx] test chooses, not always the system's nginx.conf.
func TestNginxCommand(t *testing.T) {
	tests := []struct {
		name      string
		cmd       []string
		bin, conf string
		args      []string
	}{
		{name: "none", bin: "nginx", conf: "/etc/nginx/nginx.conf"},
		{name: "shipped", cmd: []string{"nginx", "-t", "-q"}, bin: "nginx", conf: "/etc/nginx/nginx.conf"},
		{name: "a private nginx", cmd: []string{"/usr/sbin/nginx", "-q", "-t", "-c", "/run/demo/nginx.conf", "-p", "/run/demo"},
			bin: "/usr/sbin/nginx", args: []string{"-c", "/run/demo/nginx.conf", "-p", "/run/demo"}, conf: "/run/demo/nginx.conf"},
		{name: "-g kept", cmd: []string{"nginx", "-t", "-g", "pid /run/x.pid;"}, bin: "nginx",
			args: []string{"-g", "pid /run/x.pid;"}, conf: "/etc/nginx/nginx.conf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, args, conf := NginxCommand(tt.cmd)
			if d := cmp.Diff([]any{tt.bin, tt.args, tt.conf}, []any{bin, args, conf}); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
