package tiers

import (
	"context"
	"errors"
)

// A Consumer takes each pass's report: the watcher's nginx room writes the
// upstream files and 503 bodies from it (endpoints/nginx.Site), the front
// door builds its routing table from it (endpoints/front.Server). A pass
// hands the report to its consumers in order, under the lock for the
// watcher, and counts a consumer's error as the pass's (the nginx room
// fills Report.Changed, Reloaded and each TierReport's File and InSync).
// Consume runs on the watch loop's goroutine: it must not keep rep past
// its return, and blocks the next pass while it runs.
type Consumer interface {
	Consume(ctx context.Context, rep *Report) error
}

// ConsumerFunc is a Consumer made of a function.
type ConsumerFunc func(ctx context.Context, rep *Report) error

// Consume implements Consumer.
func (f ConsumerFunc) Consume(ctx context.Context, rep *Report) error { return f(ctx, rep) }

// Errors a consumer wraps so that the pass's metrics count them apart
// (llm_upstreams_test_failures_total, llm_upstreams_reload_failures_total).
// Either way the consumer keeps its last good routing in force.
var (
	// ErrRefused: the consumer's own check refused the new routing
	// (nginx -t).
	ErrRefused = errors.New("new routing refused by its check")
	// ErrNotSwitched: putting the new routing in force failed (nginx's
	// reload).
	ErrNotSwitched = errors.New("new routing not put in force")
)
