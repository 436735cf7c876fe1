package doctor

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Nginx is what nginx -t and nginx -T said, and which of the shipped
// site's copies exist.
type Nginx struct {
	Missing bool
	// TestOK is nginx -t's verdict; TestOut its message.
	TestOK  bool
	TestOut string
	// Files are the configuration files nginx -T dumped, in its order
	// (the main nginx.conf first); nil when -T failed. MainConf is read
	// from /etc/nginx/nginx.conf instead when it did.
	Files    []ConfFile
	MainConf string
	// Shipped are the shipped site files found on this host (the
	// package's or make install's copies), in Nginx.shippedPaths' order.
	Shipped []string
}

// ConfFile is one file of nginx -T's dump.
type ConfFile struct{ Path, Text string }

// ShippedSiteDirs are where an install leaves the site files: the .deb
// (sites-available), the .rpm (conf.d, active as it lands) and make
// install's share directory under the default PREFIXes; last, sites-enabled
// (where the README said to copy it, which RHEL's nginx does not read).
var ShippedSiteDirs = []string{"/etc/nginx/sites-available", "/etc/nginx/conf.d",
	"/usr/share/slurm-llm/etc/nginx", "/usr/local/share/slurm-llm/etc/nginx", "/etc/nginx/sites-enabled"}

// Site names the two shipped nginx sites.
const (
	SiteTiers = "slurm-llm.conf"
	SiteFront = "slurm-llm-front.conf"
)

// GatherNginx runs nginx -t and nginx -T, reads nginx.conf when -T
// cannot dump, and looks for the shipped site files. cmd is the nginx to
// ask, as upstreams.toml's [nginx] test names it (the binary, then only
// the arguments that choose a configuration: -c, -p, -g); none is "nginx"
// with its own nginx.conf.
func GatherNginx(ctx context.Context, h Host, cmd ...string) Nginx {
	bin, args, conf := NginxCommand(cmd)
	t := h.Run(ctx, Cmd{Name: bin, Args: append(slices.Clone(args), "-t")})
	if t.Missing {
		return Nginx{Missing: true}
	}
	n := Nginx{TestOK: t.Err == nil, TestOut: t.Text()}
	if d := h.Run(ctx, Cmd{Name: bin, Args: append(slices.Clone(args), "-T")}); d.Err == nil {
		n.Files = parseDump(d.Stdout)
	} else if b, err := h.ReadFile(conf); err == nil {
		n.MainConf = string(b)
	}
	for _, dir := range ShippedSiteDirs {
		for _, name := range []string{SiteTiers, SiteFront} {
			if e := h.Stat(path.Join(dir, name)); e.Err == nil && !e.IsDir {
				n.Shipped = append(n.Shipped, path.Join(dir, name))
			}
		}
	}
	return n
}

// NginxCommand picks, from a command line such as [nginx] test
// (["nginx", "-t", "-q", "-c", "/etc/nginx/nginx.conf"]), the binary, the
// arguments that choose nginx's configuration (-c FILE, -p PREFIX, -g
// DIRECTIVES) and the main config file they name (nginx's default
// /etc/nginx/nginx.conf without -c).
func NginxCommand(cmd []string) (bin string, args []string, conf string) {
	bin, conf = "nginx", "/etc/nginx/nginx.conf"
	if len(cmd) == 0 {
		return bin, nil, conf
	}
	bin = cmd[0]
	for i := 1; i < len(cmd); i++ {
		switch a := cmd[i]; a {
		case "-c", "-p", "-g":
			if i+1 < len(cmd) {
				args = append(args, a, cmd[i+1])
				if a == "-c" {
					conf = cmd[i+1]
				}
				i++
			}
		}
	}
	return bin, args, conf
}

var dumpHeader = regexp.MustCompile(`(?m)^# configuration file (.+):$`)

// parseDump splits nginx -T's output at its "# configuration file
// PATH:" lines.
func parseDump(out string) []ConfFile {
	idx := dumpHeader.FindAllStringSubmatchIndex(out, -1)
	files := make([]ConfFile, 0, len(idx))
	for i, m := range idx {
		end := len(out)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		text := strings.TrimPrefix(out[m[1]:end], "\n")
		files = append(files, ConfFile{Path: out[m[2]:m[3]], Text: text})
	}
	return files
}

// main is nginx.conf's text: the dump's first file, else the file read.
func (n Nginx) main() string {
	if len(n.Files) > 0 {
		return n.Files[0].Text
	}
	return n.MainConf
}

var includeLine = regexp.MustCompile(`(?m)^[ \t]*include[ \t]+([^;#]+);`)

// SiteDir is the directory whose files this nginx includes as sites:
// sites-enabled (Debian) when nginx.conf includes it, else conf.d (RHEL:
// conf.d/*.conf inside http {}); "" when it includes neither.
func (n Nginx) SiteDir() string {
	var confd string
	for _, m := range includeLine.FindAllStringSubmatch(n.main(), -1) {
		glob := strings.TrimSpace(m[1])
		switch dir := path.Dir(glob); path.Base(dir) {
		case "sites-enabled":
			return dir
		case "conf.d":
			confd = dir
		}
	}
	return confd
}

// site is the included file that is the named shipped site (by its file
// name, or for the tiers' site by its includes of llm-upstreams'
// output_dir), or "".
func (n Nginx) site(name, outputDir string) string {
	for _, f := range n.Files[min(1, len(n.Files)):] {
		if path.Base(f.Path) == name ||
			(name == SiteTiers && outputDir != "" && strings.Contains(f.Text, path.Clean(outputDir)+"/upstream-")) {
			return f.Path
		}
	}
	return ""
}

// Listen is one listen directive: an address (may be empty) and a port.
type Listen struct {
	Addr string
	Port int
}

var listenLine = regexp.MustCompile(`(?m)^[ \t]*listen[ \t]+([^ \t;]+)`)

// SiteListens are the listen directives of the included slurm-llm sites,
// in file order, or def when no site is included (the shipped ports).
func (n Nginx) SiteListens(outputDir string, def []Listen) []Listen {
	var ls []Listen
	for _, name := range []string{SiteTiers, SiteFront} {
		p := n.site(name, outputDir)
		i := slices.IndexFunc(n.Files, func(f ConfFile) bool { return f.Path == p })
		if i < 0 {
			continue
		}
		for _, m := range listenLine.FindAllStringSubmatch(n.Files[i].Text, -1) {
			if l, ok := parseListen(m[1]); ok {
				ls = append(ls, l)
			}
		}
	}
	if len(ls) == 0 {
		return def
	}
	return ls
}

// parseListen reads "127.0.0.1:8080", "[::1]:8080", "8080" or "*:80";
// a unix: socket has no port.
func parseListen(s string) (Listen, bool) {
	addr, port := "", s
	if i := strings.LastIndex(s, ":"); i >= 0 && !strings.HasSuffix(s, "]") {
		addr, port = s[:i], s[i+1:]
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return Listen{}, false
	}
	return Listen{Addr: strings.Trim(addr, "[]"), Port: p}, true
}

// CheckNginxTest checks that nginx is installed and that its
// configuration passes nginx -t.
func CheckNginxTest(n Nginx) Result {
	const c = "nginx.test"
	switch {
	case n.Missing:
		return fail(c, "nginx is not installed", "dnf install nginx (RHEL) / apt-get install nginx (Debian)")
	case !n.TestOK:
		return fail(c, "nginx -t fails: "+testError(n.TestOut),
			"nginx -t; a missing /etc/nginx/slurm-llm/upstream-*.conf is written by `llm-upstreams sync` (mkdir -p /etc/nginx/slurm-llm first)")
	}
	return ok(c, "nginx -t passes")
}

// CheckNginxSite checks that nginx includes the named site; optional
// sites (the front door's, which clients may skip) only warn.
func CheckNginxSite(n Nginx, name, outputDir string, optional bool) Result {
	c := "nginx.site"
	if name == SiteFront {
		c = "nginx.front-site"
	}
	switch {
	case n.Missing:
		return fail(c, name+": no nginx", "install nginx first")
	case n.Files == nil:
		return warn(c, name+": unknown (nginx -T needs a configuration that passes nginx -t)",
			"fix nginx -t, then: nginx -T | grep '^# configuration file'")
	}
	if p := n.site(name, outputDir); p != "" {
		return ok(c, fmt.Sprintf("%s is included (%s)", name, p))
	}
	dir := n.SiteDir()
	what := fmt.Sprintf("%s is not in nginx's configuration (nginx -T)", name)
	sev := Fail
	if optional {
		sev = Warn
		what += "; needed only if nginx is to stand before the front door"
	}
	return Result{Check: c, Status: sev, What: what, Fix: n.siteFix(name, dir)}
}

// siteFix says where to put or link the site for this nginx.
func (n Nginx) siteFix(name, dir string) string {
	if dir == "" {
		return fmt.Sprintf("nginx.conf includes neither conf.d nor sites-enabled: add `include /etc/nginx/conf.d/*.conf;` inside http {}, put %s there, then nginx -t && systemctl reload nginx", name)
	}
	src := "/usr/local/share/slurm-llm/etc/nginx/" + name
	for _, p := range n.Shipped {
		if path.Base(p) == name {
			src = p
			break
		}
	}
	verb := "cp"
	if path.Base(dir) == "sites-enabled" && path.Base(path.Dir(src)) == "sites-available" {
		verb = "ln -s"
	}
	if path.Dir(src) == dir {
		return fmt.Sprintf("%s is in %s but nginx does not load it: check its name ends in .conf and nginx.conf's include, then nginx -t && systemctl reload nginx", name, dir)
	}
	return fmt.Sprintf("%s %s %s/ && nginx -t && systemctl reload nginx", verb, src, dir)
}

// testError is the line of nginx -t's output that says what is wrong
// (its [emerg]), else its last line.
func testError(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.Contains(l, "[emerg]") || strings.Contains(l, "[alert]") {
			return firstLine(l)
		}
	}
	return firstLine(lines[len(lines)-1])
}
