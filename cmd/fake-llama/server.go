package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// server is the fake llama-server: the HTTP API plus its attached workers.
type server struct {
	cfg     config
	log     *logger
	slots   *slotTable  // the model's slots; in router mode each model has its own
	router  *router     // router mode (--models-dir), else nil
	ready   atomic.Bool // set once the model is "loaded"
	workers []*worker   // set before the HTTP port opens, then only read
	calls   rpcCalls    // round trips to workers in progress

	lnMu sync.Mutex
	ln   net.Listener // nil until the HTTP port is open

	stopping  atomic.Bool   // SIGTERM seen: the listener is closed on purpose
	cut       chan struct{} // closed to cut in-flight completions (fact 15)
	abortOnce sync.Once
}

// runServer is llama-server: connect to the workers, open the HTTP port,
// "load the model" (/health 503 meanwhile), then serve.
func runServer(cfg config, stderr io.Writer) int {
	log := newLogger(stderr)
	s := &server{cfg: cfg, log: log, slots: newSlotTable(cfg.parallel), cut: make(chan struct{})}
	if cfg.modelsDir != "" {
		s.router = newRouter(cfg.modelsDir, cfg.modelsMax, cfg.parallel, cfg.loadTime)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, stopSignals(log)...)
	go s.watchSignals(sigs)
	if cfg.startupDelay > 0 {
		time.Sleep(cfg.startupDelay)
	}
	if code, ok := s.attachWorkers(); !ok {
		return code
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.host, fmt.Sprint(cfg.port)))
	if err != nil { // real ctx_http.start, then main
		log.srv('E', "start", "couldn't bind HTTP server socket, hostname: %s, port: %d\n", cfg.host, cfg.port)
		log.srv('E', "llama_server", "exiting due to HTTP server error\n")
		log.fake("%v\n", err)
		return 1
	}
	s.lnMu.Lock()
	s.ln = ln
	s.lnMu.Unlock()
	port := ln.Addr().(*net.TCPAddr).Port
	if cfg.port == 0 { // the fake's own: real names the port only once loaded
		log.fake("listening on %s (--port 0)\n", ln.Addr())
	}
	go s.load(port)
	srv := &http.Server{Handler: s.routes(), ErrorLog: stdlog.New(io.Discard, "", 0)}
	err = srv.Serve(ln)
	if s.stopping.Load() {
		for { // the signal watcher decides when (and whether) the process exits
			time.Sleep(time.Hour)
		}
	}
	log.fake("http server: %v\n", err)
	return 1
}

// closeListener closes the HTTP port, if it is open.
func (s *server) closeListener() {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.ln != nil {
		s.ln.Close()
	}
}

// attachWorkers connects the head to its --rpc workers before the HTTP port
// opens, as real does while it parses its arguments: meanwhile the port is
// closed (connection refused), not 503 ("Other differences"). A worker it
// cannot reach is logged as real logs it and left out; the head loads and
// serves without it, not exit 1 (measured 2026-11-23, Q2). A protocol
// version mismatch ends the head (exit 1, fact 17); a worker that breaks a
// connection mid-handshake aborts it, as real's RPC_STATUS_ASSERT does (Q1
// run C: a head queued behind a busy worker aborted when that worker was
// restarted).
func (s *server) attachWorkers() (code int, ok bool) {
	for _, addr := range s.cfg.rpc {
		w, err := attachWorker(addr, s.cfg.rpcVersion, &s.calls)
		var ve *versionError
		switch {
		case err == nil:
			s.workers = append(s.workers, w)
			s.log.fake("attached RPC server %s\n", addr)
		case errors.Is(err, errUnreachable):
			s.log.llama('E', "Failed to connect to %s\n", addr)
			s.log.fake("%v: going on without it\n", err)
		case errors.As(err, &ve):
			s.log.llama('E', "RPC server version mismatch: %s\n", ve.server)
			s.log.fake("%v (head %s): exiting\n", err, s.cfg.rpcVersion)
			return 1, false
		default:
			s.abort(nil, err)
		}
	}
	return 0, true
}

// load pushes the workers' shares of the weights (--fake-model-mb, Q3), then
// waits out --fake-load-time on top; /health is 503 meanwhile. It logs what
// real llama-server logs by default, ending with "model loaded"
// and "listening on http://H:P" once loaded (measured 2026-11-23, Q2 and
// "Other differences"); a router loads nothing at start.
func (s *server) load(port int) {
	listening := "http://" + net.JoinHostPort(s.cfg.host, fmt.Sprint(port))
	if s.router != nil {
		s.ready.Store(true)
		s.log.srv('I', "llama_server", "starting server in router mode. models will be automatically loaded on-demand\n")
		s.log.srv('I', "llama_server", "listening on %s\n", listening)
		return
	}
	model := s.cfg.model
	if model == "" {
		model = "fake-model" // the fake's own: real needs a model
	}
	s.log.srv('I', "load_model", "loading model '%s'\n", model)
	s.loadWeights()
	if s.cfg.loadTime > 0 {
		time.Sleep(s.cfg.loadTime)
	}
	s.log.srv('I', "load_model", "initializing, n_slots = %d, n_ctx_slot = %d, kv_unified = 'false'\n",
		s.cfg.parallel, slotContext)
	s.ready.Store(true)
	s.log.srv('I', "llama_server", "model loaded\n")
	s.log.srv('I', "llama_server", "listening on %s\n", listening)
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", s.handleHealth)
	mux.HandleFunc("/v1/health", s.handleHealth)
	mux.HandleFunc("/v1/models", s.handleModels)
	mux.HandleFunc("/models", s.handleModels)
	mux.HandleFunc("/v1/chat/completions", s.handleChat)
	mux.HandleFunc("/chat/completions", s.handleChat)
	mux.HandleFunc("/completion", s.handleCompletion)
	mux.HandleFunc("/completions", s.handleCompletion)
	mux.HandleFunc("/infill", s.handleCompletion) // /completion's events (FACTS.md Q10)
	mux.HandleFunc("/metrics", s.handleMetrics)
	mux.HandleFunc("/slots", s.handleSlots)
	mux.HandleFunc("/slots/", s.handleSlotAction)
	mux.HandleFunc("/apply-template", s.handleApplyTemplate)
	mux.HandleFunc("/props", s.handleProps)
	mux.HandleFunc("/", s.handleWebUI)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Expect") == "100-continue" {
			// cpp-httplib answers 100 Continue as soon as it has read the
			// headers, before routing: before the loading check, whatever
			// the answer will be (its Server::process_request).
			w.WriteHeader(http.StatusContinue)
		}
		if !s.ready.Load() && r.URL.Path != "/health" && r.URL.Path != "/v1/health" {
			if r.URL.Path == "/" || strings.HasSuffix(r.URL.Path, ".html") { // a browser: real's loading page
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, loadingPage)
				return
			}
			writeError(w, http.StatusServiceUnavailable, "Loading model", "unavailable_error")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.cfg.hangHealth {
		<-r.Context().Done() // --fake-hang-health: never answer
		return
	}
	if !s.ready.Load() {
		writeError(w, http.StatusServiceUnavailable, "Loading model", "unavailable_error")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// modelName is the name a single-model head serves under, as real
// llama-server names it (measured 2026-11-23, Q4): the first --alias (a comma
// list is allowed), else the -m argument exactly as given (full path and
// .gguf). aliases are what data[].aliases lists: every alias, else that path.
func (s *server) modelName() (name string, aliases []string) {
	switch {
	case s.cfg.alias != "":
		aliases = strings.Split(s.cfg.alias, ",")
	case s.cfg.model != "":
		aliases = []string{s.cfg.model}
	default:
		aliases = []string{"fake-model"} // the fake's own: real needs a model
	}
	return aliases[0], aliases
}

// handleModels is GET /v1/models: in router mode every model with its status,
// else the one model in real's two shapes (Q4, trimmed): models[].name and
// .model, and data[].id, all the served name.
func (s *server) handleModels(w http.ResponseWriter, r *http.Request) {
	if s.router != nil {
		writeJSON(w, http.StatusOK, s.router.list())
		return
	}
	type entry = map[string]any
	name, aliases := s.modelName()
	models := []entry{{"name": name, "model": name, "modified_at": "", "size": "", "digest": "",
		"type": "model", "description": "", "tags": []string{""}, "capabilities": []string{"completion"},
		"parameters": "", "details": entry{"format": "gguf"}}}
	data := []entry{{"id": name, "aliases": aliases, "tags": []string{}, "object": "model",
		"created": time.Now().Unix(), "owned_by": "llamacpp"}}
	writeJSON(w, http.StatusOK, entry{"models": models, "object": "list", "data": data})
}

// slotsFor is the slot table a GET answers for: the server's own, or in
// router mode the one of the model ?model= names (loaded first if need be), as
// real router's proxy_get does. It answers the refusal itself when there is none.
func (s *server) slotsFor(w http.ResponseWriter, r *http.Request) (*slotTable, bool) {
	if s.router == nil {
		return s.slots, true
	}
	t, err := s.router.use(r.Context(), r.URL.Query().Get("model"))
	if err != nil {
		writeRouteError(w, err)
		return nil, false
	}
	return t, true
}

func (s *server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if s.cfg.metricsDelay > 0 { // --fake-metrics-delay: answer late
		t := time.NewTimer(s.cfg.metricsDelay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
	slots, ok := s.slotsFor(w, r)
	if !ok {
		return
	}
	if !s.cfg.metrics {
		writeError(w, http.StatusNotImplemented,
			"This server does not support metrics endpoint. Start it with `--metrics`",
			"not_supported_error")
		return
	}
	st := slots.stats()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	metric := func(name, kind, help string, v int) {
		fmt.Fprintf(w, "# HELP llamacpp:%s %s\n# TYPE llamacpp:%s %s\nllamacpp:%s %d\n",
			name, help, name, kind, name, v)
	}
	// real's names and help (FACTS.md Q13; tools/server/server-task.cpp:1523-1598 at 3f545be),
	// the counters before the gauges
	metric("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens", st.promptTokens)
	metric("tokens_predicted_total", "counter", "Number of generation tokens processed", st.predicted)
	metric("n_decode_total", "counter", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding", st.decode)
	metric("requests_processing", "gauge", "Number of requests processing", st.processing)
	metric("requests_deferred", "gauge", "Number of requests deferred", st.deferred)
}

func (s *server) handleSlots(w http.ResponseWriter, r *http.Request) {
	slots, ok := s.slotsFor(w, r)
	if !ok {
		return
	}
	st := slots.stats()
	out := make([]map[string]any, len(st.slots))
	for i, sl := range st.slots {
		// real's shape, trimmed (Q7): next_token[0] counts the tokens generated
		// and still to generate, per token; idle, n_decoded 0 and n_remain -1
		out[i] = map[string]any{"id": i, "id_task": sl.task, "n_ctx": slotContext, "is_processing": sl.busy,
			"n_prompt_tokens": slotTokens(sl), "prompt": sl.prompt,
			"next_token": []map[string]any{{"has_next_token": sl.busy, "has_new_line": false,
				"n_remain": sl.nRemain, "n_decoded": sl.nDecoded}}}
	}
	writeJSON(w, http.StatusOK, out)
}

// slotTokens is a slot's n_prompt_tokens: real shows the tokens its
// cache holds (prompt.tokens.size(), server-context.cpp:653), so an idle
// slot keeps them (FACTS.md Q12).
func slotTokens(sl slotState) int {
	if sl.busy {
		return sl.nPrompt
	}
	return sl.cached
}

// slotContext is each slot's n_ctx, as /slots and the load log show it.
const slotContext = 4096

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes llama-server's error shape.
func writeError(w http.ResponseWriter, code int, msg, kind string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"code": code, "message": msg, "type": kind}})
}
