package share

import (
	"fmt"
	"math"
	"time"
)

// Limits are one user's limits on one tier. Zero means no limit.
type Limits struct {
	// InFlight bounds the user's requests admitted and not yet done
	// (waiting in the front door or on a head).
	InFlight int
	// RequestsPerMinute bounds the requests admitted per minute (a bucket
	// of that size, refilled evenly over the minute).
	RequestsPerMinute int
	// TokensPerMinute bounds the tokens (prompt and completion) served
	// per minute: a request's tokens are known at its end and charged
	// then, so a user past the limit is refused until the bucket has
	// refilled; one large answer can take it below zero.
	TokensPerMinute int
}

// Limit names the limit a refused request hit: the kind of OpenAI's rate
// limit error ("requests" or "tokens") and the in-flight bound.
type Limit string

// The limits a Decision can name.
const (
	LimitInFlight Limit = "in_flight"
	LimitRequests Limit = "requests"
	LimitTokens   Limit = "tokens"
)

// InFlightRetry is the Retry-After of a request refused for the in-flight
// limit: one of the user's requests may end any time.
const InFlightRetry = 2 * time.Second

// LimitView is what Decide needs to know about one user on one tier now.
type LimitView struct {
	Limits Limits
	// InFlight counts the user's requests admitted and not done.
	InFlight int
	// Requests and Tokens are what the user's buckets hold now (Tokens
	// may be below zero after a large answer).
	Requests, Tokens float64
}

// Decision says whether a request may start now; when not, which limit
// it hit, when to try again, and why (for the client and the log).
type Decision struct {
	OK         bool
	Limit      Limit
	RetryAfter time.Duration
	Why        string
}

// Decide applies a user's limits: the in-flight bound first, then the
// tokens served, then the requests per minute (a request refused costs
// the user nothing).
func Decide(v LimitView) Decision {
	l := v.Limits
	if l.InFlight > 0 && v.InFlight >= l.InFlight {
		return Decision{Limit: LimitInFlight, RetryAfter: InFlightRetry,
			Why: fmt.Sprintf("%d requests in flight, the limit (in_flight %d)", v.InFlight, l.InFlight)}
	}
	if l.TokensPerMinute > 0 && v.Tokens <= 0 {
		return Decision{Limit: LimitTokens, RetryAfter: refill(1-v.Tokens, l.TokensPerMinute),
			Why: fmt.Sprintf("tokens per minute used up (tokens_per_minute %d)", l.TokensPerMinute)}
	}
	if l.RequestsPerMinute > 0 && v.Requests < 1 {
		return Decision{Limit: LimitRequests, RetryAfter: refill(1-v.Requests, l.RequestsPerMinute),
			Why: fmt.Sprintf("requests per minute used up (requests_per_minute %d)", l.RequestsPerMinute)}
	}
	return Decision{OK: true}
}

// refill is how long a bucket refilled at perMinute takes to gain n, in
// whole seconds (Retry-After's unit), at least one. A millionth of a
// second is forgiven: the buckets' floating point would otherwise turn 10 s
// into 11.
func refill(n float64, perMinute int) time.Duration {
	secs := math.Ceil(n*60/float64(perMinute) - 1e-6)
	return time.Duration(max(secs, 1)) * time.Second
}
