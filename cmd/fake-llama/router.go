package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Router model states, as real server_model_status_to_string names them.
const (
	statusUnloaded = "unloaded"
	statusLoading  = "loading"
	statusLoaded   = "loaded"
)

// router is llama-server's router mode (--models-dir): the router itself
// loads nothing; each model is a child instance loaded on first use (real
// models_autoload defaults to true), at most --models-max at once (least
// recently used first out), each with its own slots. Requests name their model:
// GET /metrics, /slots with ?model=NAME, POST completions with "model".
type router struct {
	max, parallel int
	loadTime      time.Duration

	mu     sync.Mutex
	names  []string
	models map[string]*routerModel
	uses   int64 // a counter for LRU order
}

// routerModel is one model of the directory and its child instance, if any.
type routerModel struct {
	path    string
	status  string
	slots   *slotTable    // set while loaded
	ready   chan struct{} // closed when the load in progress ends
	lastUse int64
}

// newRouter lists dir's *.gguf files (names without .gguf), all unloaded.
func newRouter(dir string, max, parallel int, loadTime time.Duration) *router {
	rt := &router{max: max, parallel: parallel, loadTime: loadTime, models: map[string]*routerModel{}}
	paths, _ := filepath.Glob(filepath.Join(dir, "*.gguf"))
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".gguf")
		rt.names = append(rt.names, name)
		rt.models[name] = &routerModel{path: p, status: statusUnloaded}
	}
	sort.Strings(rt.names)
	return rt
}

// routeError is a request the router refuses, with real router_validate_model's words.
type routeError struct{ msg string }

func (e *routeError) Error() string { return e.msg }

// use returns the slots of the named model, loading it first (for
// --fake-load-time, status "loading") when it is not loaded.
func (rt *router) use(ctx context.Context, name string) (*slotTable, error) {
	if name == "" {
		return nil, &routeError{"model name is missing from the request"}
	}
	rt.mu.Lock()
	m, ok := rt.models[name]
	if !ok {
		rt.mu.Unlock()
		return nil, &routeError{fmt.Sprintf("model '%s' not found", name)}
	}
	rt.uses++
	m.lastUse = rt.uses
	if m.status == statusUnloaded {
		rt.startLoad(m)
	}
	ready := m.ready
	rt.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for model %s: %w", name, ctx.Err())
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if m.slots == nil {
		return nil, fmt.Errorf("model %s was unloaded while loading", name)
	}
	return m.slots, nil
}

// startLoad (rt.mu held) marks m loading, unloads the least recently used
// loaded model beyond --models-max, and finishes the load after loadTime.
func (rt *router) startLoad(m *routerModel) {
	m.status, m.ready = statusLoading, make(chan struct{})
	rt.evict(m)
	time.AfterFunc(rt.loadTime, func() {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		m.status, m.slots = statusLoaded, newSlotTable(rt.parallel)
		close(m.ready)
	})
}

// evict (rt.mu held) unloads loaded models, least recently used first, until
// at most --models-max are loaded or loading (0: no limit).
func (rt *router) evict(keep *routerModel) {
	for rt.max > 0 {
		var running []*routerModel
		for _, m := range rt.models {
			if m.status != statusUnloaded {
				running = append(running, m)
			}
		}
		if len(running) <= rt.max {
			return
		}
		var lru *routerModel
		for _, m := range running {
			if m != keep && m.status == statusLoaded && (lru == nil || m.lastUse < lru.lastUse) {
				lru = m
			}
		}
		if lru == nil {
			return
		}
		lru.status, lru.slots = statusUnloaded, nil
	}
}

// list is GET /v1/models in router mode: every model with its status.
func (rt *router) list() map[string]any {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	data := []map[string]any{}
	for _, name := range rt.names {
		m := rt.models[name]
		data = append(data, map[string]any{"id": name, "aliases": []string{}, "tags": []string{},
			"object": "model", "owned_by": "llamacpp", "created": time.Now().Unix(),
			"status": map[string]any{"value": m.status,
				"args": []string{"llama-server", "--model", m.path, "--alias", name}}})
	}
	return map[string]any{"data": data, "object": "list"}
}

// streams counts streamed completions in flight over the loaded models.
func (rt *router) streams() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	n := 0
	for _, m := range rt.models {
		if m.slots != nil {
			n += m.slots.stats().streams
		}
	}
	return n
}

// writeRouteError answers a refused request: 400 invalid_request_error for the
// router's own refusals, else (the client left) nothing useful to say.
func writeRouteError(w http.ResponseWriter, err error) {
	if re, ok := err.(*routeError); ok {
		writeError(w, http.StatusBadRequest, re.msg, "invalid_request_error")
		return
	}
	writeError(w, http.StatusServiceUnavailable, err.Error(), "unavailable_error")
}
