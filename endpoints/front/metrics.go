package front

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Outcomes of a request, the outcome label of llm_front_requests_total.
const (
	// OutcomeAnswered: a head's answer reached the client whole (any
	// status the head gave).
	OutcomeAnswered = "answered"
	// OutcomeUnavailable: the front door answered 503 (nothing serves the
	// model in time: at once, or at the end of a hold).
	OutcomeUnavailable = "unavailable"
	// OutcomeBackup: another model (backup_model) answered.
	OutcomeBackup = "backup"
	// OutcomeRejected: the front door refused the request (4xx: unknown
	// model, bad JSON, too large).
	OutcomeRejected = "rejected"
	// OutcomeCut: the answer started but did not end (the head stopped
	// or its link broke mid-stream).
	OutcomeCut = "cut"
	// OutcomeCancelled: the client went away first.
	OutcomeCancelled = "cancelled"
)

// Metrics are the front door's figures for Prometheus. Label values come
// from the config and the endpoint files' validated fields, never from a
// client: a model no tier serves is counted under model="".
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	held     *prometheus.HistogramVec
	heldNow  *prometheus.GaugeVec
	retries  *prometheus.CounterVec
	upErrors *prometheus.CounterVec
	overhead prometheus.Histogram
	inFlight *prometheus.Desc
	// continued and pause: issue 20's continuations of cut streams.
	continued *prometheus.CounterVec
	pause     *prometheus.HistogramVec
	// ttft, itl, tokens and answers are the answers' own figures (issue
	// 29), by tier and model: the time to the first token and between
	// tokens as the client sees them, the tokens each answer's usage
	// reports, and how each answer ended.
	ttft    *prometheus.HistogramVec
	itl     *prometheus.HistogramVec
	tokens  *prometheus.CounterVec
	answers *prometheus.CounterVec
	// heads lists the routed heads at a scrape (set by the Server).
	heads atomic.Pointer[func() []*head]
	// accessDropped counts access lines lost to a writer that fell behind.
	accessDropped prometheus.Counter
	// byLabels caches requests' counters by their labels: a lookup by
	// label values hashes them on every request.
	byLabels sync.Map // [3]string → prometheus.Counter
}

// request is llm_front_requests_total's counter for these labels.
func (m *Metrics) request(tier, model, outcome string) prometheus.Counter {
	key := [3]string{tier, model, outcome}
	if c, ok := m.byLabels.Load(key); ok {
		return c.(prometheus.Counter)
	}
	c := m.requests.WithLabelValues(tier, model, outcome)
	m.byLabels.Store(key, c)
	return c
}

// Token kinds, the kind label of llm_front_tokens_total.
const (
	tokensPrompt     = "prompt"
	tokensCompletion = "completion"
)

// seededFinishReasons are the finish_reason series made (at zero) for
// every routed model before its first answer: the reasons OpenAI's API
// defines that llama-server gives, and the front door's own error and cut.
var seededFinishReasons = []string{"stop", "length", "tool_calls", "error", "cut"}

// ttftBuckets (seconds) fit both tiers: a 14B's first token in tens of
// milliseconds to a second, a 72B over RPC that takes seconds, and a long
// prompt's prefill that takes minutes.
var ttftBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120}

// itlBuckets (seconds): tens of tokens per second (20-50 ms) for a 14B, a
// few per second (0.2-0.5 s) for a 72B over RPC, and stalls.
var itlBuckets = []float64{0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}

// NewMetrics registers the front door's metrics on a registry of its own
// (Gatherer serves it).
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_requests_total",
		Help: "Requests through the front door by tier, model and outcome (answered, unavailable, backup, rejected, cut, cancelled)."},
		[]string{"tier", "model", "outcome"})
	m.held = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_front_held_seconds",
		Help:    "Time a request waited for its tier to have a head (requests that waited only).",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600}}, []string{"tier"})
	m.heldNow = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llm_front_held",
		Help: "Requests waiting for their tier now."}, []string{"tier"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_retries_total",
		Help: "Requests sent again after their head failed before any byte reached the client, by tier and why."},
		[]string{"tier", "reason"})
	m.upErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_upstream_errors_total",
		Help: "Failures of heads seen by the front door: refused, reset or loading before answering (before_answer), or broken mid-answer (mid_answer)."},
		[]string{"tier", "when"})
	m.overhead = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "llm_front_added_latency_seconds",
		Help:    "Time the front door adds to a request, not counting holds: from its body read to its sending to a head.",
		Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05, 0.25}})
	m.inFlight = prometheus.NewDesc("llm_front_head_in_flight",
		"Requests in flight through the front door per routed head (its address).", []string{"tier", "head"}, nil)
	m.continued = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_continuations_total",
		Help: "Streams cut before their end, by what the front door did: continued on another head, failed (no head of the model in time, or every head tried failed), refused (not continuable: why is in the access log); restored: the head it was continued on restored the conversation's saved KV cache first (slot_save_dir)."},
		[]string{"tier", "result", "restored"})
	m.pause = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_front_continuation_pause_seconds",
		Help:    "Time from a stream's cut (or its head's drain) to its continuation sent to another head.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}}, []string{"tier"})
	m.accessDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "llm_front_access_log_dropped_total",
		Help: "Access log lines lost because their writer (the journal, a file) fell too far behind; answers never wait for it."})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_front_time_to_first_token_seconds",
		Help:    "Time from a request's sending to a head to its answer's first token reaching the client (holds not counted), by tier and model.",
		Buckets: ttftBuckets}, []string{"tier", "model"})
	m.itl = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_front_inter_token_seconds",
		Help:    "Time between two tokens of a streamed answer reaching the client, by tier and model.",
		Buckets: itlBuckets}, []string{"tier", "model"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_tokens_total",
		Help: "Tokens of the answers through the front door, from each answer's usage, by tier, model and kind (prompt, completion)."},
		[]string{"tier", "model", "kind"})
	m.answers = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_front_answers_total",
		Help: "Answers by tier, model and finish reason: the head's (stop, length, tool_calls, ...), error (the head answered an error) or cut (it ended before a finish reason)."},
		[]string{"tier", "model", "finish_reason"})
	m.reg.MustRegister(m.accessDropped, m.requests, m.held, m.heldNow, m.retries, m.upErrors, m.overhead, headCollector{m}, m.continued, m.pause,
		m.ttft, m.itl, m.tokens, m.answers)
	return m
}

// seedRouted makes the answers' series of every routed head's declared
// models exist, at zero, before their first answer: a routed model with
// no traffic then reads 0 tokens/s rather than nothing, and an alert on
// a finish reason sees its first answer as an increase. It runs at each
// scrape, never on the request path; the labels come from the endpoint
// files' validated fields, as every other label here.
func (m *Metrics) seedRouted() {
	f := m.heads.Load()
	if f == nil {
		return
	}
	for _, h := range (*f)() {
		d := h.declared.Load()
		if d == nil {
			continue
		}
		for _, model := range *d {
			m.ttft.WithLabelValues(h.tier, model)
			m.itl.WithLabelValues(h.tier, model)
			m.tokens.WithLabelValues(h.tier, model, tokensPrompt)
			m.tokens.WithLabelValues(h.tier, model, tokensCompletion)
			for _, r := range seededFinishReasons {
				m.answers.WithLabelValues(h.tier, model, r)
			}
		}
	}
}

// headCollector reports each routed head's requests in flight at the
// scrape: heads come and go with the tables, so the series do too.
type headCollector struct{ m *Metrics }

func (c headCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.inFlight }

func (c headCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.m.heads.Load()
	if f == nil {
		return
	}
	for _, h := range (*f)() {
		ch <- prometheus.MustNewConstMetric(c.m.inFlight, prometheus.GaugeValue, float64(h.inFlight.Load()), h.tier, h.addr)
	}
}

// Gatherer is what /metrics serves: the routed models' answer series
// made first (seedRouted), then everything gathered.
func (m *Metrics) Gatherer() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		m.seedRouted()
		return m.reg.Gather()
	})
}
