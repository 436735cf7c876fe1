package doctor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints/nginx"
)

// TestRealNginxDump reads a real nginx -T (nginx -T only tests and
// prints: nothing listens) of a Debian-shaped nginx.conf including the
// shipped site from sites-enabled, with its upstream files written as
// llm-upstreams writes them: the dump's format, the include directory,
// the site and its ports are found as the doctor finds them.
func TestRealNginxDump(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs nginx and root")
	}
	root := t.TempDir()
	out, sites := filepath.Join(root, "slurm-llm"), filepath.Join(root, "sites-enabled")
	for _, d := range []string{out, sites} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	specs := []nginx.TierSpec{{Name: "fast"}, {Name: "reasoning", Backup: "fast"}}
	for _, up := range nginx.Render(specs, nil, nginx.RenderMeta{Generator: "doctor test"}) {
		write(t, filepath.Join(out, up.File), string(up.Bytes))
	}
	site, err := os.ReadFile(filepath.Join("..", "..", "..", "etc", "nginx", SiteTiers))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sites, SiteTiers), strings.ReplaceAll(string(site), "/etc/nginx/slurm-llm/", out+"/"))
	main := filepath.Join(root, "nginx.conf")
	write(t, main, "pid "+root+"/nginx.pid;\nerror_log "+root+"/error.log;\nevents {}\nhttp {\n    include "+sites+"/*;\n}\n")
	h := NewHost(nil)
	args := []string{"-p", root, "-c", main, "-e", filepath.Join(root, "error.log")}
	if o := h.Run(context.Background(), Cmd{Name: bin, Args: append([]string{"-t"}, args...)}); o.Err != nil {
		t.Fatalf("nginx -t: %v\n%s", o.Err, o.Text())
	}
	o := h.Run(context.Background(), Cmd{Name: bin, Args: append([]string{"-T"}, args...)})
	if o.Err != nil {
		t.Fatalf("nginx -T: %v\n%s", o.Err, o.Text())
	}
	n := Nginx{TestOK: true, Files: parseDump(o.Stdout)}
	if len(n.Files) < 2 || n.Files[0].Path != main {
		t.Fatalf("dump's files: %d, first %q", len(n.Files), n.Files[0].Path)
	}
	if got := n.SiteDir(); got != sites {
		t.Errorf("SiteDir = %q, want %q", got, sites)
	}
	hasFix(t, CheckNginxSite(n, SiteTiers, out, false), OK)
	hasFix(t, CheckNginxSite(n, SiteFront, out, true), Warn, "/usr/local/share/slurm-llm/etc/nginx/slurm-llm-front.conf "+sites+"/")
	if d := cmp.Diff([]Listen{{"127.0.0.1", 8080}, {"127.0.0.1", 8081}}, n.SiteListens(out, nil)); d != "" {
		t.Errorf("listens (-want +got):\n%s", d)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
