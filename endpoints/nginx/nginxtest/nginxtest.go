// Package nginxtest runs a private real nginx with the shipped site
// (etc/nginx/slurm-llm.conf) adapted to its own ports and directories, for
// end-to-end tests and benchmarks that compare with or go through nginx.
// It is for tests only: it imports nothing of the controller, so that the
// controller's own tests may import it.
package nginxtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"slurm-llm/endpoints/nginx"
)

// Nginx is one private nginx, killed by PID when its test ends.
type Nginx struct {
	// Prefix holds its config, pid, logs and temp files; Conf is its
	// main config.
	Prefix, Conf string
	// Out is the site's include directory (the updater's output_dir).
	Out string
	// Fast and Reasoning are the loopback ports of the site's two
	// servers (the shipped :8080 and :8081).
	Fast, Reasoning int
	// ExtraDir's *.conf files are included in http {} (tests add servers).
	ExtraDir string
	// PID is the master's process id, and its workers' process group.
	PID int
}

// Bin finds the nginx binary, or skips the test (not root, no nginx).
func Bin(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("e2e nginx tests need root")
	}
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Skip("nginx not installed")
	return ""
}

// Start writes the configs (site from siteFile, the shipped
// etc/nginx/slurm-llm.conf), the first upstream files (every tier down)
// and starts nginx in the foreground under root.
func Start(t testing.TB, siteFile string, workers int) *Nginx {
	t.Helper()
	bin := Bin(t)
	root := t.TempDir()
	n := &Nginx{Prefix: filepath.Join(root, "nginx"), Out: filepath.Join(root, "slurm-llm"),
		Fast: freePort(t), Reasoning: freePort(t)}
	n.ExtraDir = filepath.Join(n.Prefix, "extra")
	for _, d := range []string{n.Prefix + "/tmp", n.Out, n.ExtraDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.writeConfigs(t, siteFile, workers)
	specs := []nginx.TierSpec{{Name: "fast"}, {Name: "reasoning", Backup: "fast"}}
	for _, up := range nginx.Render(specs, nil, nginx.RenderMeta{Generator: "nginxtest"}) {
		if err := os.WriteFile(filepath.Join(n.Out, up.File), up.Bytes, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "-p", n.Prefix, "-c", n.Conf, "-g", "daemon off;")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.PID = cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", n.Fast))
		if err == nil {
			c.Close()
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx does not listen: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// writeConfigs adapts the site to this nginx's ports and directories and
// wraps it in a minimal main config.
func (n *Nginx) writeConfigs(t testing.TB, siteFile string, workers int) {
	t.Helper()
	site, err := os.ReadFile(siteFile)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.NewReplacer("/etc/nginx/slurm-llm/", n.Out+"/",
		"127.0.0.1:8080;", fmt.Sprintf("127.0.0.1:%d;", n.Fast),
		"127.0.0.1:8081;", fmt.Sprintf("127.0.0.1:%d;", n.Reasoning)).Replace(string(site))
	if strings.Contains(s, ":8080;") || strings.Contains(s, "include /etc/nginx/") {
		t.Fatalf("site config not fully adapted:\n%s", s)
	}
	p := n.Prefix
	main := fmt.Sprintf(`user root;
worker_processes %[2]d;
worker_rlimit_nofile 8192;
error_log %[1]s/error.log info;
pid %[1]s/nginx.pid;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/tmp/body;
    proxy_temp_path %[1]s/tmp/proxy;
    fastcgi_temp_path %[1]s/tmp/fastcgi;
    uwsgi_temp_path %[1]s/tmp/uwsgi;
    scgi_temp_path %[1]s/tmp/scgi;
    include %[1]s/extra/*.conf;
    include %[1]s/site.conf;
}
`, p, max(workers, 1))
	n.Conf = filepath.Join(p, "nginx.conf")
	for path, b := range map[string]string{n.Conf: main, filepath.Join(p, "site.conf"): s} {
		if err := os.WriteFile(path, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestArgv and ReloadArgv are the updater's [nginx] test and reload for
// this nginx.
func (n *Nginx) TestArgv() []string {
	return []string{"nginx", "-t", "-q", "-p", n.Prefix, "-c", n.Conf}
}

func (n *Nginx) ReloadArgv() []string {
	return []string{"nginx", "-s", "reload", "-p", n.Prefix, "-c", n.Conf}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
