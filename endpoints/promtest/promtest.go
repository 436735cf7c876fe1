// Package promtest reads Prometheus text for tests: the metrics the
// controller serves are written by client_golang, which orders label pairs
// and formats numbers its own way, so tests compare samples, not text. It
// is for tests only.
package promtest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Samples parses text in Prometheus' text format into its samples, keyed
// name{label="value",…} with the labels sorted by name; a histogram gives
// its _count and _sum. A parse error is returned as is.
func Samples(text string) (map[string]float64, error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[Key(name, labels)] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[Key(name, labels)] = m.GetGauge().GetValue()
			case m.Untyped != nil:
				out[Key(name, labels)] = m.GetUntyped().GetValue()
			case m.Histogram != nil:
				out[Key(name+"_count", labels)] = float64(m.GetHistogram().GetSampleCount())
				out[Key(name+"_sum", labels)] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out, nil
}

// Key is a sample's key in Samples.
func Key(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, labels[k]))
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// Line parses one sample line as written in the text format
// (`name{tier="fast",state="wanted"} 2`) into its key and value.
func Line(line string) (string, float64, error) {
	s, err := Samples(line + "\n")
	if err != nil {
		return "", 0, err
	}
	for k, v := range s {
		return k, v, nil
	}
	return "", 0, fmt.Errorf("no sample in %q", line)
}

// Families describes what a gatherer serves, one line per family sorted
// by name: "name type labels… help". A test compares it with a golden
// file, so that a name, a type, a label or a help text changed by accident
// fails it (dashboards and alerts depend on them).
func Families(g interface {
	Gather() ([]*dto.MetricFamily, error)
}) ([]string, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range fams {
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		out = append(out, fmt.Sprintf("%s %s %s %s", f.GetName(), strings.ToLower(f.GetType().String()),
			"{"+strings.Join(slices.Sorted(maps.Keys(labels)), ",")+"}", f.GetHelp()))
	}
	slices.Sort(out)
	return out, nil
}

// Clashes names the pairs of families among lines (as Families writes
// them) that an OpenMetrics scraper takes for one: a counter's family
// name is its name without _total, and each family also claims its
// samples' names (a histogram's _bucket, _sum, _count; _created), so a
// gauge x beside a counter x_total, or a gauge x_count beside a
// histogram x, clash. Sorted; empty when none do.
func Clashes(lines []string) []string {
	owner := map[string]string{}
	var out []string
	for _, line := range lines {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, typ := f[0], f[1]
		base := name
		var claims []string
		switch typ {
		case "counter":
			base = strings.TrimSuffix(name, "_total")
			claims = []string{base, base + "_total", base + "_created"}
		case "histogram":
			claims = []string{base, base + "_bucket", base + "_sum", base + "_count", base + "_created"}
		case "summary":
			claims = []string{base, base + "_sum", base + "_count", base + "_created"}
		default:
			claims = []string{base}
		}
		for _, c := range claims {
			if o, ok := owner[c]; ok && o != name {
				out = append(out, fmt.Sprintf("%s and %s (both %s)", o, name, c))
				continue
			}
			owner[c] = name
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
