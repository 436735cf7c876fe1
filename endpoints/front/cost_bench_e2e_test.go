//go:build e2e

package front_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"slurm-llm/cmd/fake-llama/faketest"
)

// doorTarget is where BenchmarkE2EFrontIdentityCost sends requests: the
// head directly, or a front door (proc).
type doorTarget struct {
	name, url, cfg string
	proc           *exec.Cmd
}

// BenchmarkE2EFrontIdentityCost: what identity and accounting add to the
// front door's latency. One fake head answering at once (64 slots), and
// two front doors over it: "off" ([front.auth] mode off, no usage
// database, fair share off) and "on" (mode identify, a static key per
// client, the usage database in state_dir, fair share on); every client
// sends its own key to both. Like BenchmarkE2EFrontLatency: 1 and 16
// clients on kept-alive connections, small non-streaming chat requests
// and 16-token streams, the head directly and each door in turn, 1.5 s
// each, 4 rounds. It prints each one's p50 and p99, what each door adds
// over the head at p50 and p99, what "on" adds over "off", each door's CPU
// per request; and, at the end, the requests the usage database holds
// and any it dropped.
func BenchmarkE2EFrontIdentityCost(b *testing.B) {
	w := newDoorWorld(b)
	port, _ := w.head("tiny", "--parallel", "64", "--fake-tokens", "16", "--fake-token-rate", "0")
	w.publish("101", port, "tiny")
	users := make([]string, 16)
	for i := range users {
		users[i] = fmt.Sprintf("user%02d", i)
	}
	keysFile, byUser := w.staticKeys(users...)
	keys := make([]string, len(users))
	for i, u := range users {
		keys[i] = byUser[u]
	}
	targets := []doorTarget{{name: "direct", url: fmt.Sprintf("http://127.0.0.1:%d", port)}}
	for _, d := range []struct{ name, extra string }{
		{"off", "[front.auth]\nmode = \"off\"\n[front.usage]\ndatabase = \"\"\n[front.fair_share]\nenabled = false\n"},
		{"on", fmt.Sprintf("[front.auth]\nmode = \"identify\"\nstatic_keys_file = %q\nslurm_accounts = false\n[front.fair_share]\nenabled = true\n", keysFile)},
	} {
		fport := faketest.FreePort(b)
		url := fmt.Sprintf("http://127.0.0.1:%d", fport)
		cfg := w.config(d.name, fmt.Sprintf("127.0.0.1:%d", fport), d.extra)
		proc := w.front(cfg, url)
		targets = append(targets, doorTarget{name: d.name, url: url, cfg: cfg, proc: proc})
	}
	for i := 0; i < b.N; i++ {
		for _, kind := range []struct{ name, body string }{
			{"chat", `{"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`},
			{"stream", `{"model":"tiny","stream":true,"max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			for _, clients := range []int{1, 16} {
				res := map[string][]time.Duration{}
				cpu := map[string]time.Duration{}
				for _, t := range targets {
					latencies(b, t.url, kind.body, keys, clients, 300*time.Millisecond) // warm the connections
				}
				for range 4 {
					for _, t := range targets {
						before := groupCPU(b, t.pgid())
						res[t.name] = append(res[t.name], latencies(b, t.url, kind.body, keys, clients, 1500*time.Millisecond)...)
						cpu[t.name] += groupCPU(b, t.pgid()) - before
					}
				}
				label := fmt.Sprintf("%s,%d-clients", kind.name, clients)
				var parts []string
				for _, t := range targets {
					s := res[t.name]
					slices.Sort(s)
					part := fmt.Sprintf("%s p50 %.3f p99 %.3f ms", t.name, ms(pct(s, .5)), ms(pct(s, .99)))
					if t.proc != nil {
						add50, add99 := pct(s, .5)-pct(res["direct"], .5), pct(s, .99)-pct(res["direct"], .99)
						us := float64(cpu[t.name].Microseconds()) / float64(len(s))
						part += fmt.Sprintf(" (adds %.3f/%.3f ms, CPU %.0f µs/req)", ms(add50), ms(add99), us)
						b.ReportMetric(ms(add50), "added-p50-ms("+t.name+","+label+")")
						b.ReportMetric(ms(add99), "added-p99-ms("+t.name+","+label+")")
						b.ReportMetric(us, "cpu-us/req("+t.name+","+label+")")
					}
					parts = append(parts, part)
				}
				on50 := pct(res["on"], .5) - pct(res["off"], .5)
				on99 := pct(res["on"], .99) - pct(res["off"], .99)
				b.ReportMetric(ms(on50), "on-minus-off-p50-ms("+label+")")
				b.ReportMetric(ms(on99), "on-minus-off-p99-ms("+label+")")
				b.Logf("%-16s %s; on-off p50 %+.3f ms, p99 %+.3f ms", label, strings.Join(parts, "; "), ms(on50), ms(on99))
			}
		}
	}
	on := targets[2]
	w.stop(on.proc)
	_, rep := w.usage(on.cfg)
	b.Logf("the usage database holds %d requests, %d dropped", rep.Total.Requests, rep.Dropped)
	b.ReportMetric(float64(rep.Dropped), "usage-dropped")
}

// pgid is a door's process group (its pid), 0 for the head.
func (t doorTarget) pgid() int {
	if t.proc == nil {
		return 0
	}
	return t.proc.Process.Pid
}
