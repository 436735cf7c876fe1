package report

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"slurm-llm/endpoints"
	"slurm-llm/endpoints/tiers"
)

// statusEndpoint is a ready endpoint of tier/job on addr:port, its lease a
// minute after t0.
func statusEndpoint(tier, job, host string, port int) endpoints.Endpoint {
	return endpoints.Endpoint{
		Schema: endpoints.SchemaVersion, Tier: tier, JobID: job, Host: host, Port: port,
		State: endpoints.StateReady, Models: []string{"m"}, Node: "node1", PID: 1,
		StartedAt: t0, Heartbeat: t0, LeaseExpires: t0.Add(time.Minute),
	}
}

func TestWriteStatus(t *testing.T) {
	root := t.TempDir()
	cfg := tiers.DefaultConfig()
	cfg.EndpointDir, cfg.LockFile = filepath.Join(root, "endpoints"), filepath.Join(root, "lock")
	cfg.AllowAnyOwner, cfg.AllowAnyNetwork = true, true
	cfg.Tiers = map[string]tiers.TierConfig{"fast": {JobName: "llm-fast"}, "reasoning": {Backup: "fast", JobName: "llm-reasoning"}}
	if err := os.MkdirAll(cfg.EndpointDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := endpoints.Write(cfg.EndpointDir, statusEndpoint("fast", "1", "10.0.0.1", 8080)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.EndpointDir, "fast-2.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	replica := statusEndpoint("fast", "3", "10.0.0.3", 8080) // a second replica, busy
	four := 4
	replica.Node, replica.InFlight = "node3", &four
	if err := endpoints.Write(cfg.EndpointDir, replica); err != nil {
		t.Fatal(err)
	}
	u := tiers.New(cfg, tiers.Options{Now: func() time.Time { return t0 }})
	rep, err := u.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var text, js bytes.Buffer
	if err := WriteStatus(&text, rep, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteStatus(&js, rep, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fast (backup)", "10.0.0.1:8080", "fast-2.json", "unexpected end of JSON"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, text.String())
		}
	}
	// Each replica's line: job, node, state and requests in flight.
	if !regexp.MustCompile(`(?m)^fast-3\.json +fast +3 +0 +node3 +ready +4 +10\.0\.0\.3:8080 `).MatchString(text.String()) {
		t.Errorf("status lacks the replica's line (job 3, node3, ready, 4 in flight):\n%s", text.String())
	}
	if !strings.Contains(js.String(), `"served_by": "fast"`) {
		t.Errorf("json status lacks served_by:\n%s", js.String())
	}
}
