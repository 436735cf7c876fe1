package scripts

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// entry is one path a package holds, as the manifest says it and as the
// built package lists it: "file 0755", "config 0644", "dir 0755",
// "symlink ../fake-llama".
type entry struct {
	Path string
	What string
}

// manifestLine is one line of scripts/package/manifest.
type manifestLine struct {
	Pkg, Type, Mode, Dst, Src string
	Line                      int
}

// readManifest reads scripts/package/manifest; an unreadable line fails
// the test with its number.
func readManifest(t *testing.T) []manifestLine {
	t.Helper()
	f, err := os.Open("package/manifest")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []manifestLine
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) < 4 || len(fs) > 5 {
			t.Fatalf("package/manifest:%d: want PACKAGE TYPE MODE DESTINATION [SOURCE], got %q", n, line)
		}
		l := manifestLine{Pkg: fs[0], Type: fs[1], Mode: fs[2], Dst: fs[3], Line: n}
		if len(fs) == 5 {
			l.Src = fs[4]
		}
		out = append(out, l)
	}
	return out
}

// formatPaths are the per-format words of the manifest.
var formatPaths = map[string]*strings.Replacer{
	"rpm": strings.NewReplacer("@ENVFILE@", "/etc/sysconfig/slurm-llm", "@NGINXSITES@", "/etc/nginx/conf.d"),
	"deb": strings.NewReplacer("@ENVFILE@", "/etc/default/slurm-llm", "@NGINXSITES@", "/etc/nginx/sites-available"),
}

// want is what the manifest says package pkg holds in format fmt.
func want(lines []manifestLine, pkg, format string) []entry {
	var out []entry
	for _, l := range lines {
		if l.Pkg != pkg {
			continue
		}
		e := entry{Path: formatPaths[format].Replace(l.Dst)}
		switch l.Type {
		case "symlink":
			e.What = "symlink " + l.Src
		default:
			e.What = l.Type + " " + l.Mode
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// TestPackagesMatchManifest builds the .rpm and the .deb of both packages
// (make package) and reads each back with its own tools, Debian's rpm and
// dpkg-deb, against the one manifest: every file with its mode, configs
// marked noreplace (rpm) or as conffiles (deb), symlinks and their
// targets, the directories rpm must own, the dependencies and the four
// scriptlets. It also checks that everything install.sh ships (but the
// repository's own tooling) is in the manifest, so that a new shipped file
// cannot be left out of the packages unnoticed.
func TestPackagesMatchManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages (-short)")
	}
	for _, tool := range []string{"rpm", "dpkg-deb", "make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the packages cannot be checked (apt-get install -y rpm dpkg make git)", tool)
		}
	}
	lines := readManifest(t)
	out := t.TempDir()
	cmd := exec.Command("./scripts/package.sh", "--out", out)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/package.sh: %v\n%s", err, b)
	}
	deps := map[string][]string{"node": {"munge"}, "controller": {"munge", "nginx"}}
	for _, pkg := range []string{"node", "controller"} {
		rpmFile := only(t, out, "slurm-llm-"+pkg+"-*.x86_64.rpm")
		debFile := only(t, out, "slurm-llm-"+pkg+"_*_amd64.deb")
		t.Run(pkg+"/rpm", func(t *testing.T) {
			if d := cmp.Diff(want(lines, pkg, "rpm"), rpmEntries(t, rpmFile)); d != "" {
				t.Errorf("%s against the manifest (-manifest +package):\n%s", filepath.Base(rpmFile), d)
			}
			if d := cmp.Diff(deps[pkg], rpmRequires(t, rpmFile)); d != "" {
				t.Errorf("requires (-want +got):\n%s", d)
			}
			scripts := run(t, "rpm", "-qp", "--scripts", rpmFile)
			for _, s := range []string{"preinstall", "postinstall", "preuninstall", "postuninstall"} {
				if !strings.Contains(scripts, s+" scriptlet") {
					t.Errorf("no %s scriptlet", s)
				}
			}
			if !strings.Contains(scripts, "SLURM_LLM_PACKAGE="+pkg) {
				t.Errorf("the scriptlets do not name the package %s", pkg)
			}
		})
		t.Run(pkg+"/deb", func(t *testing.T) {
			got := debEntries(t, debFile, want(lines, pkg, "deb"))
			if d := cmp.Diff(want(lines, pkg, "deb"), got); d != "" {
				t.Errorf("%s against the manifest (-manifest +package):\n%s", filepath.Base(debFile), d)
			}
			if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", debFile, "Depends")); got != strings.Join(deps[pkg], ", ") {
				t.Errorf("Depends: %q, want %q", got, strings.Join(deps[pkg], ", "))
			}
			for _, s := range []string{"preinst", "postinst", "prerm", "postrm"} {
				if b := run(t, "dpkg-deb", "-I", debFile, s); !strings.Contains(b, "SLURM_LLM_PACKAGE="+pkg) {
					t.Errorf("%s does not name the package %s", s, pkg)
				}
			}
		})
	}
	t.Run("everything shipped is packaged", func(t *testing.T) { shippedInManifest(t, lines) })
}

// only is the one file in dir matching pattern.
func only(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) != 1 {
		t.Fatalf("%s in %s: %v, want one file", pattern, dir, m)
	}
	return m[0]
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return string(b)
}

// rpmEntries lists an rpm's paths as rpm itself reads them.
func rpmEntries(t *testing.T, file string) []entry {
	t.Helper()
	qf := "[%{FILEMODES:octal} %{FILEFLAGS:fflags}|%{FILENAMES}|%{FILELINKTOS}\n]"
	var out []entry
	for _, line := range strings.Split(strings.TrimSpace(run(t, "rpm", "-qp", "--qf", qf, file)), "\n") {
		parts := strings.Split(line, "|")
		if len(parts) != 3 {
			t.Fatalf("rpm --qf line %q", line)
		}
		modeFlags := strings.Fields(parts[0])
		mode, flags := modeFlags[0], ""
		if len(modeFlags) > 1 {
			flags = modeFlags[1]
		}
		e := entry{Path: parts[1]}
		perm := fmt.Sprintf("%04s", mode[len(mode)-4:])
		switch {
		case strings.HasPrefix(mode, "12"):
			e.What = "symlink " + parts[2]
		case strings.HasPrefix(mode, "4"):
			e.What = "dir " + perm
		case flags == "cn":
			e.What = "config " + perm
		case flags == "":
			e.What = "file " + perm
		default:
			e.What = "file " + perm + " flags " + flags
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// rpmRequires are an rpm's requirements but rpm's own (rpmlib(...)).
func rpmRequires(t *testing.T, file string) []string {
	var out []string
	for _, r := range strings.Fields(run(t, "rpm", "-qp", "--requires", file)) {
		if !strings.HasPrefix(r, "rpmlib(") && !strings.HasPrefix(r, "/bin/sh") {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// debEntries lists a .deb's paths from dpkg-deb: files, symlinks, the
// conffiles; a directory only where the manifest names it (dpkg lists
// every parent, /usr/ too, and owns them all).
func debEntries(t *testing.T, file string, manifest []entry) []entry {
	t.Helper()
	conf := map[string]bool{}
	for _, c := range strings.Fields(run(t, "dpkg-deb", "-I", file, "conffiles")) {
		conf[c] = true
	}
	dirs := map[string]bool{}
	for _, e := range manifest {
		if strings.HasPrefix(e.What, "dir ") {
			dirs[e.Path] = true
		}
	}
	var out []entry
	for _, line := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", file)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c line %q", line)
		}
		path := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		perm := octalPerm(f[0][1:])
		e := entry{Path: path}
		switch f[0][0] {
		case 'd':
			if !dirs[path] {
				continue
			}
			e.What = "dir " + perm
		case 'l':
			e.What = "symlink " + f[len(f)-1]
		default:
			e.What = "file " + perm
			if conf[path] {
				e.What = "config " + perm
			}
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// octalPerm turns "rwxr-xr-x" into "0755".
func octalPerm(s string) string {
	var n int
	for i, c := range s[:9] {
		if c != '-' {
			n |= 1 << (8 - i)
		}
	}
	return fmt.Sprintf("%04o", n)
}

// shippedInManifest stages what install.sh ships under /usr and checks
// that each file is the source of a manifest line (the repository's own
// tooling, scripts/*.sh, stays out of the packages).
func shippedInManifest(t *testing.T, lines []manifestLine) {
	stage := t.TempDir()
	cmd := exec.Command("./scripts/install.sh", "--destdir", stage, "--prefix", "/usr",
		"--unitdir", "/usr/lib/systemd/system", "--envfile", "/etc/sysconfig/slurm-llm")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, b)
	}
	sources := map[string]bool{}
	for _, l := range lines {
		src := l.Src
		if src == "" || l.Type == "symlink" {
			src = l.Dst
		}
		sources[formatPaths["rpm"].Replace(src)] = true
	}
	err := filepath.Walk(stage, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(path, stage)
		if strings.HasPrefix(rel, "/usr/share/slurm-llm/scripts/") {
			return nil
		}
		if !sources[rel] {
			t.Errorf("install.sh ships %s, which no package holds: add it to scripts/package/manifest", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRPMUpgradeKeepsTheAdminsConfig installs the controller's .rpm into
// an empty root with Debian's rpm (no scriptlets, no dependencies: only
// the payload and rpm's database), changes a config as an admin would,
// upgrades to a later version and checks that the change is still there
// and that rpm verifies the package's other files as installed.
func TestRPMUpgradeKeepsTheAdminsConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the packages (-short)")
	}
	if os.Geteuid() != 0 {
		t.Skip("rpm --root needs root")
	}
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Fatal("rpm is not installed (apt-get install -y rpm)")
	}
	dir := t.TempDir()
	for _, v := range []string{"0.1.0", "0.1.1"} {
		cmd := exec.Command("./scripts/package.sh", "--out", filepath.Join(dir, v), "--version", v, "rpm")
		cmd.Dir = ".."
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("package.sh --version %s: %v\n%s", v, err, b)
		}
	}
	root := filepath.Join(dir, "root")
	rpmIn := func(args ...string) {
		t.Helper()
		args = append([]string{"--root", root, "--nodeps", "--noscripts"}, args...)
		if b, err := exec.Command("rpm", args...).CombinedOutput(); err != nil {
			t.Fatalf("rpm %s: %v\n%s", strings.Join(args, " "), err, b)
		}
	}
	rpmIn("-i", only(t, filepath.Join(dir, "0.1.0"), "slurm-llm-controller-*.rpm"))
	conf := filepath.Join(root, "etc/slurm-llm/upstreams.toml")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	const mine = "\n# the admin's change\n"
	f.WriteString(mine)
	f.Close()
	rpmIn("-U", only(t, filepath.Join(dir, "0.1.1"), "slurm-llm-controller-*.rpm"))
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), mine) {
		t.Errorf("the upgrade replaced the admin's upstreams.toml")
	}
	q, err := exec.Command("rpm", "--root", root, "-q", "slurm-llm-controller").Output()
	if err != nil || !strings.Contains(string(q), "0.1.1") {
		t.Errorf("rpm -q after the upgrade: %q, %v", q, err)
	}
	// rpm -V names what differs from the package: only the changed config
	// (size and digest, flagged as a config with "c").
	v, _ := exec.Command("rpm", "--root", root, "-V", "--nodeps", "slurm-llm-controller").Output()
	for _, line := range strings.Split(strings.TrimSpace(string(v)), "\n") {
		if line != "" && !strings.HasSuffix(line, " c /etc/slurm-llm/upstreams.toml") {
			t.Errorf("rpm -V: %s", line)
		}
	}
}
