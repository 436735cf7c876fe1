package front

import (
	"errors"
	"maps"
	"net/http"
	"slices"

	"slurm-llm/endpoints/front/webui"
)

// llama-server's web UI (package webui): the page at the root URL is the
// UI tier's heads', presented as llama-server's router's so that it
// reaches every tier's model; under a tier's prefix it is that tier's.

// answerNoStreams answers the resumable streams' paths as a head holding
// none of the caller's (webui.StreamsLookupPath says why).
func (s *Server) answerNoStreams(w http.ResponseWriter, c *call) {
	if c.path == webui.StreamsLookupPath {
		s.answer(w, c, http.StatusOK, []byte("[]\n"))
		return
	}
	s.reject(w, c, http.StatusNotFound, "not_found_error", "no stream to resume here: the front door continues a cut stream itself", nil)
}

// refuseFeature answers a webui.Refused path as a head with the feature
// off.
func (s *Server) refuseFeature(w http.ResponseWriter, c *call) {
	s.reject(w, c, http.StatusForbidden, "feature_disabled", "this feature is disabled", nil)
}

// uiTier is the tier whose heads serve the page at the root URL: [front]
// ui_tier, else the first tier by name.
func (s *Server) uiTier() string {
	cfg := s.cfg.Load()
	if cfg.UITier != "" {
		return cfg.UITier
	}
	names := slices.Sorted(maps.Keys(cfg.Tiers))
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// uiHead is a routed head for tier's UI; with none, any tier's (the page
// is the same llama-server build), so that the page loads while its tier
// is away; nil when no head is routed at all.
func (s *Server) uiHead(tier string) *head {
	tab := s.tab.Load()
	if hs := tab.heads[tier]; len(hs) > 0 {
		return hs[0]
	}
	for _, t := range slices.Sorted(maps.Keys(tab.heads)) {
		if hs := tab.heads[t]; len(hs) > 0 {
			return hs[0]
		}
	}
	return nil
}

// serveUI answers a GET of the UI from a head of pinned's tier (a
// prefix's), else of the UI tier; at the root, /props says the front door
// is a router (a router's /props?model= is that model's head's).
func (s *Server) serveUI(w http.ResponseWriter, r *http.Request, c *call, pinned string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use GET", nil)
		return
	}
	tier := pinned
	if tier == "" {
		tier = s.uiTier()
		if m := r.URL.Query().Get("model"); m != "" && c.path == "/props" {
			if t, _ := s.resolve(m); t != "" {
				tier = t // a router's /props?model=: that model's head answers
			}
		}
	}
	h := s.uiHead(tier)
	if h == nil {
		s.uiUnavailable(w, c)
		return
	}
	c.tier = h.tier
	w.Header().Set(TierHeader, h.tier)
	router := pinned == "" && r.URL.Query().Get("model") == ""
	status, n, err := webui.Proxy(w, r, s.opts.Transport, h.addr, c.path, router)
	switch {
	case errors.Is(err, webui.ErrSlots):
		s.reject(w, c, http.StatusBadGateway, "server_error", err.Error(), nil)
	case err != nil:
		s.uiUnavailable(w, c)
	default:
		c.status, c.bytesOut, c.outcome = status, n, OutcomeAnswered
	}
}

// uiUnavailable is the page while no head is routed (webui.Unavailable).
func (s *Server) uiUnavailable(w http.ResponseWriter, c *call) {
	w.Header().Set(TierHeader, "none")
	n := webui.Unavailable(w)
	c.status, c.bytesOut, c.outcome, c.why = http.StatusServiceUnavailable, n, OutcomeRejected, "no head is routed for the web UI"
}

// serveModelsFeed holds the router's models feed open (webui.Feed) until
// the page leaves or the front door stops its feeds (StopFeeds, before its
// listeners shut down).
func (s *Server) serveModelsFeed(w http.ResponseWriter, r *http.Request, c *call) {
	if r.Method != http.MethodGet {
		s.reject(w, c, http.StatusMethodNotAllowed, "invalid_request_error", "use GET", nil)
		return
	}
	n := webui.Feed(w, r, s.feedsDone)
	c.status, c.bytesOut, c.outcome = http.StatusOK, n, OutcomeAnswered
}

// StopFeeds ends the held /models/sse feeds, so that the listeners shut
// down at once; call it before them. Safe to call more than once.
func (s *Server) StopFeeds() { s.stopFeeds.Do(func() { close(s.feedsDone) }) }
