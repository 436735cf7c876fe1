package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"slurm-llm/endpoints/front"
)

// TestStatusShowsTheFrontDoorsUsers: `llm-upstreams status` ends with each
// tier's users now, as the front door's /status gives them.
func TestStatusShowsTheFrontDoorsUsers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(front.Status{Tiers: []front.TierStatus{
			{Tier: "reasoning", Users: []front.UserStatus{{User: "alice", Serving: 2, Waiting: 38}, {User: "", Serving: 0, Waiting: 1}}},
			{Tier: "fast"}}})
	}))
	defer srv.Close()
	var out bytes.Buffer
	writeFrontUsers(t.Context(), &out, strings.TrimPrefix(srv.URL, "http://"))
	for _, want := range []string{"users now", "reasoning  alice", "2          38", "(anonymous)", "fast       -"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	writeFrontUsers(t.Context(), &out, "127.0.0.1:1")
	if !strings.Contains(out.String(), "not answering") {
		t.Errorf("an absent front door: %q", out.String())
	}
}
