package main

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"net/http"
	"strings"
	"sync"
)

// The web UI: llama-server serves its chat page at / (one gzipped file,
// everything inlined) and a small loading page with 503 while the model
// loads; the page asks /props and /v1/models and chats through
// /v1/chat/completions (FACTS.md Q11). The fake serves a page of its own
// (webui/index.html: not llama.cpp's) at the same paths, asking the same.

//go:embed webui/index.html
var webUI []byte

var (
	webUIGzOnce sync.Once
	webUIGz     []byte
)

// gzipped is the page compressed once, as llama-server keeps index.html.gz.
func gzipped() []byte {
	webUIGzOnce.Do(func() {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		zw.Write(webUI)
		zw.Close()
		webUIGz = b.Bytes()
	})
	return webUIGz
}

// loadingPage is what a browser gets while the model loads (llama-server
// answers 503 with its loading.html, which reloads itself).
const loadingPage = `<!doctype html><html><head><meta http-equiv="refresh" content="5"></head><body>The model is loading. Please wait.</body></html>` + "\n"

func (s *server) handleWebUI(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" && r.URL.Path != "/index.html" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeError(w, http.StatusMethodNotAllowed, "use GET", "invalid_request_error")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Write(webUI)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	w.Write(gzipped())
}

// handleProps is GET /props: the fields the page reads (real's, trimmed).
func (s *server) handleProps(w http.ResponseWriter, r *http.Request) {
	name, _ := s.modelName()
	path := s.cfg.model
	if path == "" {
		path = name
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": slotContext, "params": map[string]any{}},
		"total_slots":                 s.cfg.parallel,
		"model_alias":                 name,
		"model_path":                  path,
		"modalities":                  map[string]bool{"vision": false, "audio": false},
		"build_info":                  "fake-llama",
	})
}
