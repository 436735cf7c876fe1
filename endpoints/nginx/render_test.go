package nginx

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"slurm-llm/endpoints"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// golden compares got with testdata/<name>.golden, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}

func TestRenderGolden(t *testing.T) {
	meta := RenderMeta{Generator: "llm-upstreams test", Source: "/cluster/shared/ai/endpoints"}
	tiers := []TierSpec{{Name: "fast"}, {Name: "reasoning", Backup: "fast", RetryAfter: 300}, {Name: "code-x", RetryAfter: 10}}
	s1 := endpoints.Server{Addr: "10.0.0.2:8080", File: "fast-200.json", Restart: 1}
	s2 := endpoints.Server{Addr: "10.0.0.1:8080", File: "fast-100.json"}
	s6 := endpoints.Server{Addr: "[fd00::7]:9000", File: "reasoning-7.json"}
	dup := endpoints.Server{Addr: "10.0.0.1:8080", File: "fast-99.json"}
	tests := []struct {
		name string
		live map[string][]endpoints.Server
	}{
		{name: "all-live", live: map[string][]endpoints.Server{"fast": {s1, s2}, "reasoning": {s6}, "code-x": {s2}}},
		{name: "nothing-live", live: nil},
		{name: "backup", live: map[string][]endpoints.Server{"fast": {s1, s2, dup}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var all bytes.Buffer
			rendered := Render(tiers, tt.live, meta)
			assertSafeRender(t, rendered)
			for _, u := range rendered {
				all.WriteString("==> " + u.File + " <==\n")
				all.Write(u.Bytes)
			}
			golden(t, "render-"+tt.name, all.Bytes())
		})
	}
}

// Regression: output that depended on input order reloaded nginx for nothing.
func TestRenderStableUnderInputOrder(t *testing.T) {
	tiers := []TierSpec{{Name: "fast"}}
	a := endpoints.Server{Addr: "10.0.0.1:1", File: "fast-1.json"}
	b := endpoints.Server{Addr: "10.0.0.2:1", File: "fast-2.json"}
	x := Render(tiers, map[string][]endpoints.Server{"fast": {a, b}}, RenderMeta{})
	y := Render(tiers, map[string][]endpoints.Server{"fast": {b, a}}, RenderMeta{})
	if d := cmp.Diff(x, y); d != "" {
		t.Errorf("render depends on input order (-ab +ba):\n%s", d)
	}
}

func TestRenderCounts(t *testing.T) {
	tiers := []TierSpec{{Name: "fast"}, {Name: "reasoning", Backup: "fast"}, {Name: "solo"}}
	s := endpoints.Server{Addr: "10.0.0.1:1", File: "fast-1.json"}
	type count struct {
		Tier, ServedBy string
		Servers        int
	}
	var got []count
	for _, u := range Render(tiers, map[string][]endpoints.Server{"fast": {s}}, RenderMeta{}) {
		got = append(got, count{u.Tier, u.ServedBy, u.Servers})
	}
	want := []count{{"fast", "fast", 1}, {"reasoning", "fast", 1}, {"solo", "", 0}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestRenderHeaderCannotBreakOutOfComment(t *testing.T) {
	u := Render([]TierSpec{{Name: "fast"}}, nil, RenderMeta{Generator: "x", Source: "/a\nserver evil:1;"})
	if bytes.Contains(u[0].Bytes, []byte("\nserver evil")) {
		t.Errorf("a newline in the source path escaped the comment:\n%s", u[0].Bytes)
	}
}

// safeLine is every line shape a rendered upstream file may have.
var safeLine = regexp.MustCompile(`^(#[^\n]*|` +
	`map \$host \$slurm_llm_[a-z0-9_]+_(live|served_by) \{ default ("[a-z0-9_-]+"|[01]); \}|` +
	`map \$host \$slurm_llm_[a-z0-9_]+_retry_after \{ default [0-9]{1,6}; \}|` +
	`upstream slurm_llm_[a-z0-9_]+ \{|` +
	`    server [A-Za-z0-9.:\[\]-]+ max_fails=1 fail_timeout=10s;|` +
	`    server 127\.0\.0\.1:9 down;|    least_conn;|    keepalive [0-9]+;|\}|)$`)

// assertSafeRender fails unless every line of every file is a known shape.
func assertSafeRender(t *testing.T, ups []Upstream) {
	t.Helper()
	for _, u := range ups {
		for _, line := range strings.Split(string(u.Bytes), "\n") {
			if !safeLine.MatchString(line) {
				t.Fatalf("unexpected line in %s: %q", u.File, line)
			}
		}
	}
}

// FuzzRenderParsed feeds arbitrary bytes to the parser of untrusted
// endpoint files: whatever it accepts must render to lines of a known
// shape (nothing from a file but validated fields reaches nginx).
func FuzzRenderParsed(f *testing.F) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	good, err := endpoints.Marshal(endpoints.Endpoint{Schema: endpoints.SchemaVersion, Tier: "fast", JobID: "1234",
		Host: "node1", Port: 8080, State: endpoints.StateReady, Models: []string{"qwen"}, Node: "node1", PID: 4242,
		StartedAt: t0, Heartbeat: t0.Add(time.Minute), LeaseExpires: t0.Add(2 * time.Minute), RunID: "0123456789abcdef"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"schema":1,"tier":"fast","job_id":"1","host":"a;b","port":1}`))
	f.Add(bytes.Replace(good, []byte(`"node1"`), []byte(`"fd00::1"`), 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := endpoints.Parse(b)
		if err != nil {
			return
		}
		d := endpoints.Decision{Entry: endpoints.Entry{File: endpoints.FileName(e.Tier, e.JobID), Endpoint: e}, Live: true}
		assertSafeRender(t, Render([]TierSpec{{Name: e.Tier}}, map[string][]endpoints.Server{e.Tier: {endpoints.ServerOf(d, e.Host)}}, RenderMeta{}))
	})
}
