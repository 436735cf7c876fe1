package usage

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts tokens and requests by Slurm account and tier, and the
// records the recorder dropped. Label values are bounded: accounts come
// from Slurm or the static keys file, tiers from the config, outcomes
// from the front door's fixed list; the user label is there only when
// asked for (user_label), since a site's users are many. Register it (a
// prometheus.Collector) on the front door's registry.
type Metrics struct {
	userLabel bool
	tokens    *prometheus.CounterVec
	requests  *prometheus.CounterVec
	dropped   prometheus.Counter
}

// NewMetrics returns the counters; userLabel adds a user label to the
// token and request counters.
func NewMetrics(userLabel bool) *Metrics {
	labels := []string{"account", "tier"}
	if userLabel {
		labels = append(labels, "user")
	}
	return &Metrics{
		userLabel: userLabel,
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_usage_tokens_total",
			Help: "Tokens the heads reported for requests through the front door, by Slurm account, tier (and user where configured) and kind (prompt, completion)."},
			append(append([]string{}, labels...), "kind")),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_usage_requests_total",
			Help: "Requests through the front door by Slurm account, tier (and user where configured) and outcome."},
			append(append([]string{}, labels...), "outcome")),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "llm_front_usage_dropped_total",
			Help: "Usage records that never reached the usage database (its queue was full, or a write failed)."}),
	}
}

// Observe counts rec.
func (m *Metrics) Observe(rec Record) {
	lv := []string{rec.Account, rec.Tier}
	if m.userLabel {
		lv = append(lv, rec.User)
	}
	m.requests.WithLabelValues(append(lv, rec.Outcome)...).Inc()
	if rec.PromptTokens > 0 {
		m.tokens.WithLabelValues(append(lv, "prompt")...).Add(float64(rec.PromptTokens))
	}
	if rec.CompletionTokens > 0 {
		m.tokens.WithLabelValues(append(lv, "completion")...).Add(float64(rec.CompletionTokens))
	}
}

// Describe and Collect make Metrics a prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.tokens.Describe(ch)
	m.requests.Describe(ch)
	m.dropped.Describe(ch)
}

// Collect gathers the counters.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.tokens.Collect(ch)
	m.requests.Collect(ch)
	m.dropped.Collect(ch)
}
