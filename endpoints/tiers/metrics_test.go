package tiers

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"

	"slurm-llm/endpoints/promtest"
)

func TestMetricsTextfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "llm-upstreams.prom")
	m := &Metrics{}
	m.Record(Report{}, errors.New("x"))
	if err := m.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(b), "llm_upstreams_pass_errors_total 1\n") {
		t.Errorf("textfile = %q, %v", b, err)
	}
}

// The availability metrics parse as Prometheus text (the reference
// parser) and say what the passes saw: time per state, transitions, one
// preemption whose recovery took 12 s.
func TestTierMetrics(t *testing.T) {
	m := &Metrics{}
	routed := TierView{Tier: "fast", State: StateRouted, Reason: ReasonRouted, StartToReady: 4 * time.Second}
	down := TierView{Tier: "fast", State: StateDown, Reason: ReasonPreempted, ExpectedBack: tp(t0.Add(time.Minute))}
	m.RecordViews([]TierView{routed}, nil, nil, t0)
	m.RecordViews([]TierView{down}, nil, []string{"fast"}, t0.Add(100*time.Second))
	m.RecordViews([]TierView{routed}, []outageEnd{{Tier: "fast", Cause: ReasonPreempted, Duration: 12 * time.Second}}, nil, t0.Add(112*time.Second))
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("not valid Prometheus text: %v\n%s", err, b.String())
	}
	value := func(name string, labels map[string]string) float64 {
		t.Helper()
		for _, mt := range fams[name].GetMetric() {
			ok := true
			for _, l := range mt.GetLabel() {
				if want, in := labels[l.GetName()]; in && want != l.GetValue() {
					ok = false
				}
			}
			if !ok {
				continue
			}
			switch {
			case mt.Counter != nil:
				return mt.GetCounter().GetValue()
			case mt.Gauge != nil:
				return mt.GetGauge().GetValue()
			case mt.Histogram != nil:
				return float64(mt.GetHistogram().GetSampleCount())
			}
		}
		t.Fatalf("no %s %v in\n%s", name, labels, b.String())
		return 0
	}
	fast := map[string]string{"tier": "fast"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"llm_upstreams_tier_routed", fast, 1},
		{"llm_upstreams_tier_state_seconds_total", map[string]string{"tier": "fast", "state": "routed"}, 100},
		{"llm_upstreams_tier_state_seconds_total", map[string]string{"tier": "fast", "state": "down"}, 12},
		{"llm_upstreams_tier_transitions_total", map[string]string{"tier": "fast", "state": "down"}, 1},
		{"llm_upstreams_tier_preemptions_total", fast, 1},
		{"llm_upstreams_tier_recovery_seconds", fast, 1},
		{"llm_upstreams_tier_outage_seconds", fast, 1},
		{"llm_upstreams_tier_start_to_ready_seconds", fast, 4},
		{"llm_upstreams_tier_expected_back_timestamp_seconds", fast, 0},
	} {
		if got := value(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if s := fams["llm_upstreams_tier_recovery_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); s != 12 {
		t.Errorf("recovery sum %v, want 12", s)
	}
}

// An elastic tier's re-plan is its own histogram, and what it serves with
// is an info gauge while it is routed.
func TestTierMetricsElastic(t *testing.T) {
	m := &Metrics{}
	full := TierView{Tier: "big", State: StateRouted, Reason: ReasonRouted, Serving: "3 of 3 nodes, context 131072"}
	replanning := TierView{Tier: "big", State: StateDown, Reason: ReasonReplanning}
	smaller := TierView{Tier: "big", State: StateRouted, Reason: ReasonRouted, Serving: "2 of 3 nodes, context 65536"}
	m.RecordViews([]TierView{full}, nil, nil, t0)
	m.RecordViews([]TierView{replanning}, nil, nil, t0.Add(time.Minute))
	m.RecordViews([]TierView{smaller}, []outageEnd{{Tier: "big", Cause: ReasonReplanning, Duration: 3 * time.Second}}, nil,
		t0.Add(time.Minute+3*time.Second))
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("not valid Prometheus text: %v\n%s", err, b.String())
	}
	h := fams["llm_upstreams_tier_replan_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 3 {
		t.Errorf("re-plans: count %d sum %v, want 1 and 3", h.GetSampleCount(), h.GetSampleSum())
	}
	if r := fams["llm_upstreams_tier_recovery_seconds"].GetMetric()[0].GetHistogram(); r.GetSampleCount() != 0 {
		t.Errorf("a re-plan counted as a recovery from preemption")
	}
	info := fams["llm_upstreams_tier_serving_info"].GetMetric()
	if len(info) != 1 || !strings.Contains(info[0].String(), "2 of 3 nodes, context 65536") {
		t.Errorf("serving info %v, want one for 2 of 3 nodes", info)
	}
}

// Each tier's state and reason (a word), and when its outage under way
// began, for the dashboard's state timeline and the alert on a tier down
// longer than expected (issue 29).
func TestTierStateInfoAndOutageStart(t *testing.T) {
	m := &Metrics{}
	scrape := func() map[string]float64 {
		t.Helper()
		var b strings.Builder
		if err := m.WritePrometheus(&b); err != nil {
			t.Fatal(err)
		}
		got, err := promtest.Samples(b.String())
		if err != nil {
			t.Fatal(err)
		}
		for k := range got {
			if !strings.HasPrefix(k, "llm_upstreams_tier_state_info") && !strings.HasPrefix(k, "llm_upstreams_tier_outage_start") {
				delete(got, k)
			}
		}
		return got
	}
	m.RecordViews([]TierView{{Tier: "fast", State: StateRouted, Reason: ReasonRouted}}, nil, nil, t0)
	m.RecordOutageStarts(nil)
	want := map[string]float64{
		`llm_upstreams_tier_state_info{reason="routed",state="routed",tier="fast"}`: 1,
		`llm_upstreams_tier_outage_start_timestamp_seconds{tier="fast"}`:            0,
	}
	if d := cmp.Diff(want, scrape()); d != "" {
		t.Errorf("routed (-want +got):\n%s", d)
	}
	down := t0.Add(100 * time.Second)
	m.RecordViews([]TierView{{Tier: "fast", State: StateBackup, Reason: ReasonRefused + ": fast-1.json: bad lease"}}, nil, nil, down)
	m.RecordOutageStarts(map[string]time.Time{"fast": down, "gone": t0})
	want = map[string]float64{
		`llm_upstreams_tier_state_info{reason="refused",state="backup",tier="fast"}`: 1,
		`llm_upstreams_tier_outage_start_timestamp_seconds{tier="fast"}`:             float64(down.Unix()),
	}
	if d := cmp.Diff(want, scrape()); d != "" {
		t.Errorf("on its backup (-want +got):\n%s", d)
	}
}

// Every reason a view gives has a word of its own.
func TestReasonCodes(t *testing.T) {
	seen := map[string]string{}
	for _, rc := range reasonCodes {
		if got := reasonCode(rc.reason + " (and more)"); got != rc.code {
			t.Errorf("reasonCode(%q…) = %q, want %q", rc.reason, got, rc.code)
		}
		if other, dup := seen[rc.code]; dup {
			t.Errorf("%q and %q share the word %q", other, rc.reason, rc.code)
		}
		seen[rc.code] = rc.reason
	}
	if got := reasonCode("a reason of tomorrow"); got != "other" {
		t.Errorf("an unknown reason's word is %q, want other", got)
	}
}

var updateMetrics = flag.Bool("update-metrics", false, "rewrite testdata/metrics-families.golden")

// The families watch serves, with their types, labels and help texts,
// are a contract with dashboards and alerts: this fails when one changes
// by accident (go test -update-metrics rewrites the golden file on purpose).
func TestMetricFamiliesGolden(t *testing.T) {
	m := &Metrics{}
	m.Record(Report{Time: t0, Tiers: []TierReport{{Tier: "fast", Servers: []string{"a"}}}}, nil)
	m.RecordSchedulerCall(errors.New("down"))
	m.RecordHint()
	m.RecordStale(1, 1)
	m.RecordRecordError()
	routed := TierView{Tier: "big", State: StateRouted, Reason: ReasonRouted, Serving: "3 of 3 nodes, context 131072"}
	m.RecordViews([]TierView{routed}, nil, nil, t0)
	m.RecordViews([]TierView{routed}, []outageEnd{{Tier: "big", Cause: ReasonPreempted, Duration: time.Second}}, []string{"big"}, t0.Add(time.Second))
	got, err := promtest.Families(m.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "metrics-families.golden"), strings.Join(got, "\n")+"\n", *updateMetrics)
	// An OpenMetrics scraper reads a counter x_total as family x: the gauge
	// llm_upstreams_rejected_files beside llm_upstreams_rejected_files_total
	// were one family to it (issue 29).
	if c := promtest.Clashes(got); len(c) != 0 {
		t.Errorf("families that OpenMetrics takes for one: %v", c)
	}
}

func TestClashes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"gauge beside its counter", []string{"x gauge {} a", "x_total counter {} b"}, []string{"x and x_total (both x)"}},
		{"gauge named as a histogram's count", []string{"h histogram {} a", "h_count gauge {} b"}, []string{"h and h_count (both h_count)"}},
		{"distinct", []string{"x_total counter {} a", "x_seconds histogram {} b", "y gauge {} c"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, promtest.Clashes(tc.lines)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// checkGolden compares got with the file at path, or rewrites it.
func checkGolden(t *testing.T, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}
