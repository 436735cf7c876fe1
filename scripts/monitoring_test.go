package scripts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"go.yaml.in/yaml/v3"
)

// The shipped dashboard and alert rules (issue 29) are checked against
// what the programs serve: the metric families their golden files pin.

const (
	dashboardFile = "../etc/grafana/slurm-llm.json"
	rulesFile     = "../etc/prometheus/slurm-llm.rules.yml"
	readmeFile    = "../README.md"
)

// goldenFiles pin every family a metrics listener serves: watch's, the
// keeper's, the front door's, and the build information and Go and
// process collectors every listener adds.
var goldenFiles = []string{
	"../endpoints/tiers/testdata/metrics-families.golden",
	"../cmd/llm-upstreams/testdata/process-families.golden",
	"../endpoints/keeper/testdata/metrics-families.golden",
	"../endpoints/front/testdata/metrics-families.golden",
}

// servedNames are the sample names a query may name: each golden family's
// (a histogram's _bucket, _sum and _count; a summary's too), Prometheus'
// own up and ALERTS, and the rules' recorded names.
func servedNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{"up": true, "ALERTS": true, "ALERTS_FOR_STATE": true}
	for _, path := range goldenFiles {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				t.Fatalf("%s: %q is not a family line", path, line)
			}
			switch name, typ := f[0], f[1]; typ {
			case "histogram":
				names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
			case "summary":
				names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
			default:
				names[name] = true
			}
		}
	}
	for _, r := range readRules(t) {
		if r.Record != "" {
			names[r.Record] = true
		}
	}
	return names
}

// promqlNames are the metric names a PromQL expression selects, in order
// of appearance. Grafana's variables ($tier, $__rate_interval, …) may
// appear where PromQL has strings, ranges or numbers. It reads what the
// shipped files write; the promtool check below parses them fully.
func promqlNames(expr string) []string {
	s := stringsRE.ReplaceAllString(expr, `""`)
	s = varRE.ReplaceAllString(s, "1")
	s = matchersRE.ReplaceAllString(s, "")
	s = rangeRE.ReplaceAllString(s, "")
	s = clauseRE.ReplaceAllString(s, "")
	var out []string
	for _, m := range tokenRE.FindAllStringSubmatchIndex(s, -1) {
		if m[2] < 0 { // a number or a duration
			continue
		}
		word := s[m[2]:m[3]]
		rest := strings.TrimLeft(s[m[3]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promqlKeywords[strings.ToLower(word)] {
			continue // a function, an aggregation or a keyword
		}
		out = append(out, word)
	}
	return out
}

var (
	stringsRE  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	varRE      = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)
	matchersRE = regexp.MustCompile(`\{[^{}]*\}`)
	rangeRE    = regexp.MustCompile(`\[[^\[\]]*\]`)
	clauseRE   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// tokenRE: numbers and durations (1, 0.95, 5m, 1e3) first, then names.
	tokenRE        = regexp.MustCompile(`\b[0-9][0-9A-Za-z_.]*|([A-Za-z_:][A-Za-z0-9_:]*)`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}
)

func TestPromqlNames(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`sum by (tier) (rate(llm_front_requests_total{outcome="unavailable",tier=~"$tier"}[$__rate_interval]))`, "llm_front_requests_total"},
		{`histogram_quantile(0.9, sum by (le, model) (rate(llm_front_time_to_first_token_seconds_bucket[5m])))`, "llm_front_time_to_first_token_seconds_bucket"},
		{`a_total / on (tier) group_left (reason) b_info > bool 0.5 unless c offset 1h`, "a_total b_info c"},
		{`time() - x > 600 and x > 0 or vector(1)`, "x x"},
		{`max by (tier) (y{reason=~"disabled|held", q="a{b}"}) * 1e3 + Inf`, "y"},
		{`llm_front_tokns_total`, "llm_front_tokns_total"}, // a typo is a name too: the family check fails on it
	} {
		if d := cmp.Diff(strings.Fields(tc.want), promqlNames(tc.expr)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.expr, d)
		}
	}
}

// grafanaDashboard is the part of the dashboard JSON these tests read.
type grafanaDashboard struct {
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T) ([]byte, grafanaDashboard) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return b, d
}

// dashboardExprs are the dashboard's PromQL expressions: each target's
// and each query variable's, by where they are.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	_, d := readDashboard(t)
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		// label_values(EXPR, label) and query_result(EXPR) are Grafana's.
		if m := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`).FindStringSubmatch(q); m != nil {
			q = m[1]
		} else if m := regexp.MustCompile(`^query_result\((.*)\)$`).FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		out["variable "+v.Name] = q
	}
	return out
}

// Every PromQL expression of the dashboard names only families that the
// programs serve (a renamed metric, a typo or a family never shipped is a
// blank panel in Grafana).
func TestDashboardNamesServedMetrics(t *testing.T) {
	served := servedNames(t)
	exprs := dashboardExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("only %d expressions read from %s", len(exprs), dashboardFile)
	}
	for _, where := range slices.Sorted(maps.Keys(exprs)) {
		names := promqlNames(exprs[where])
		if len(names) == 0 {
			t.Errorf("%s: no metric named in %q", where, exprs[where])
		}
		for _, n := range names {
			if !served[n] {
				t.Errorf("%s: %s is served by no program (not in the golden files): %q", where, n, exprs[where])
			}
		}
	}
}

// The dashboard is valid against Grafana's own schema: the Grafana
// Foundation SDK's types, generated from Grafana's schemas (dashboard,
// each panel type's options and field config, the Prometheus query),
// decode it strictly (an unknown or mistyped field fails) and validate it.
func TestDashboardGrafanaSchema(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	b, d := readDashboard(t)
	var dash dashboard.Dashboard
	if err := buildErrors(dash.UnmarshalJSONStrict(b)); err != nil {
		t.Fatalf("%s does not decode as a Grafana dashboard: %v", dashboardFile, err)
	}
	if err := dash.Validate(); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	ids := map[int]string{}
	for _, p := range d.Panels {
		if _, ok := cog.NewRuntime().ConfigForPanelcfgVariant(p.Type); !ok && p.Type != "row" {
			t.Errorf("panel %q: type %q is no panel Grafana's schema knows", p.Title, p.Type)
		}
		if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share the id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
	}
}

// buildErrors is err, or nil for the empty cog.BuildErrors that the SDK's
// strict decoding returns when it found nothing wrong (a non-nil error
// holding a nil slice).
func buildErrors(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

// Every expression of the dashboard and the rules parses as PromQL:
// promtool check rules reads them as recording rules (Grafana's variables
// replaced by values).
func TestMonitoringPromQLParses(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (apt-get install prometheus)")
	}
	exprs := dashboardExprs(t)
	for i, r := range readRules(t) {
		exprs[fmt.Sprintf("rule %d", i)] = r.Expr
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1d", "${tier:regex}", "fast",
		"$tier", "fast", "$model", "m", "$__range_s", "86400")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var group struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	group.Groups = append(group.Groups, struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	}{Name: "check"})
	for i, where := range slices.Sorted(maps.Keys(exprs)) {
		group.Groups[0].Rules = append(group.Groups[0].Rules, rule{Record: fmt.Sprintf("check_%d", i), Expr: vars.Replace(exprs[where])})
	}
	b, err := yaml.Marshal(group)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "exprs.yml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}

// promRule is one rule of the rules file.
type promRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []promRule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []promRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []promRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return out
}

// Every alert names only served families, links its runbook row, and has
// a row in README's runbook and a line in its Monitoring section.
func TestAlertRules(t *testing.T) {
	served := servedNames(t)
	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	monitoring := section(string(readme), "## Monitoring")
	alerts := 0
	for _, r := range readRules(t) {
		name := r.Alert + r.Record
		for _, n := range promqlNames(r.Expr) {
			if !served[n] {
				t.Errorf("rule %s: %s is served by no program: %q", name, n, r.Expr)
			}
		}
		if r.Alert == "" {
			continue
		}
		alerts++
		anchor := "alert-" + strings.ToLower(r.Alert)
		if got, want := r.Annotations["runbook_url"], "README.md#"+anchor; got != want {
			t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, got, want)
		}
		if !bytes.Contains(readme, []byte(`<a id="`+anchor+`"></a>`)) {
			t.Errorf("alert %s: README.md has no runbook row with id %q", r.Alert, anchor)
		}
		if !strings.Contains(monitoring, "`"+r.Alert+"`") {
			t.Errorf("alert %s: README's Monitoring section does not describe it", r.Alert)
		}
	}
	if alerts < 8 {
		t.Errorf("%d alerts; the issue asks for at least 8 kinds", alerts)
	}
}

// README's Monitoring section describes every panel of the dashboard.
func TestReadmeDescribesEveryPanel(t *testing.T) {
	readme, err := os.ReadFile(readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	monitoring := section(string(readme), "## Monitoring")
	if monitoring == "" {
		t.Fatal("README.md has no ## Monitoring section")
	}
	_, d := readDashboard(t)
	for _, p := range d.Panels {
		want := "**" + p.Title + "**"
		if p.Type == "row" {
			want = "\n*" + p.Title // a row heads its panels: *Tiers.*
		}
		if !strings.Contains(monitoring, want) {
			t.Errorf("panel %q is not described in README's Monitoring section (as %q)", p.Title, want)
		}
	}
}

// section is the text of the markdown section that starts with heading,
// up to the next heading of its level or above.
func section(doc, heading string) string {
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := doc[i+1+len(heading):]
	level := strings.Count(strings.Fields(heading)[0], "#")
	for _, l := range []string{"\n# ", "\n## ", "\n### "}[:level] {
		if j := strings.Index(rest, l); j >= 0 {
			rest = rest[:j]
		}
	}
	return rest
}

// The queries the demo ends with are the dashboard panels' own (each
// panel's variables set to all, $__rate_interval to the last 10 minutes).
func TestDemoShowsPanelsQueries(t *testing.T) {
	b, err := os.ReadFile("demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	_, d := readDashboard(t)
	vars := strings.NewReplacer("$tier", ".*", "$model", ".*", "$__rate_interval", "10m")
	shown := regexp.MustCompile(`(?m)^\s*show_panel "([^"]+)" '([^']+)'$`).FindAllStringSubmatch(string(b), -1)
	if len(shown) < 10 {
		t.Fatalf("demo.sh shows %d panels; want the main ones", len(shown))
	}
	for _, m := range shown {
		title, expr := m[1], m[2]
		var found, same bool
		for _, p := range d.Panels {
			if p.Title != title {
				continue
			}
			found = true
			for _, tg := range p.Targets {
				same = same || vars.Replace(tg.Expr) == expr
			}
		}
		if !found || !same {
			t.Errorf("demo.sh shows %q as %q: no such panel (%v) or none of its queries", title, expr, found)
		}
	}
}
