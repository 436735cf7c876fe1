package supervisor

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"slurm-llm/endpoints"
)

// endpoint returns the endpoint file content for the current state; ok is
// false in the terminal states, which have no file.
func (r *Runner) endpoint() (endpoints.Endpoint, bool) {
	st, ok := r.state.Endpoint()
	if !ok {
		return endpoints.Endpoint{}, false
	}
	now := r.opts.Now().UTC()
	models := r.models
	if models == nil {
		models = []string{}
	}
	return endpoints.Endpoint{
		Schema:       endpoints.SchemaVersion,
		Tier:         r.plan.Tier,
		JobID:        r.plan.JobID,
		RestartCount: r.plan.RestartCount,
		Host:         r.plan.EndpointHost,
		Port:         r.plan.EndpointPort,
		State:        st,
		Reason:       truncateReason(r.reason),
		Models:       models,
		Node:         r.plan.Head.Node,
		PID:          r.opts.PID,
		StartedAt:    r.startedAt.UTC(),
		Heartbeat:    now,
		LeaseExpires: now.Add(r.plan.Timeouts.Lease),
	}, true
}

// writeEndpoint publishes the current state (heartbeat and state changes).
// A failed write is logged and retried at the next heartbeat: the shared
// file system may hiccup, the tier keeps serving.
func (r *Runner) writeEndpoint() {
	e, ok := r.endpoint()
	if !ok {
		return
	}
	if err := endpoints.Write(r.plan.EndpointDir, e); err != nil {
		r.log.Warn("cannot write endpoint file", "dir", r.plan.EndpointDir, "error", err)
	}
}

// removeEndpoint deletes the endpoint file.
func (r *Runner) removeEndpoint() {
	if err := endpoints.Remove(r.plan.EndpointDir, r.plan.Tier, r.plan.JobID); err != nil {
		r.log.Error("cannot remove endpoint file", "dir", r.plan.EndpointDir, "error", err)
		return
	}
	r.log.Info("endpoint file removed")
}

// truncateReason keeps a reason within the endpoint format's limit and
// printable (exit causes may quote process output).
func truncateReason(s string) string {
	const max = 200
	s = strings.Map(func(c rune) rune {
		if !unicode.IsPrint(c) {
			return ' '
		}
		return c
	}, s)
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
