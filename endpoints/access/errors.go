package access

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"slurm-llm/endpoints/access/share"
)

// OpenAI's error codes this package answers with.
const (
	// CodeInvalidKey: no valid key or trusted identity (401).
	CodeInvalidKey = "invalid_api_key"
	// CodeRateLimited: past a per-user limit or the key endpoint's rate
	// (429).
	CodeRateLimited = "rate_limit_exceeded"
)

// ErrorBody is OpenAI's error document: {"error": {"message", "type",
// "param": null, "code"}}, with a newline. The SDKs raise it as an API
// error carrying message and code.
func ErrorBody(msg, typ, code string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
	return append(b, '\n')
}

// WriteError answers status with OpenAI's error document.
func WriteError(w http.ResponseWriter, status int, msg, typ, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(ErrorBody(msg, typ, code))
}

// WriteUnauthorized answers 401 as OpenAI does for a missing or bad key,
// with WWW-Authenticate naming the Bearer scheme.
func WriteUnauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="slurm-llm"`)
	WriteError(w, http.StatusUnauthorized, msg, "invalid_request_error", CodeInvalidKey)
}

// WriteRateLimited answers 429 rate_limit_exceeded with Retry-After (whole
// seconds, at least 1) for a request a limit refused (d.OK false). The
// error's type is OpenAI's kind of limit: "requests" (in flight and
// requests per minute) or "tokens".
func WriteRateLimited(w http.ResponseWriter, d share.Decision) {
	typ := "requests"
	if d.Limit == share.LimitTokens {
		typ = "tokens"
	}
	w.Header().Set("Retry-After", RetryAfter(d.RetryAfter))
	WriteError(w, http.StatusTooManyRequests, "rate limit reached: "+d.Why+"; retry after the time in Retry-After", typ, CodeRateLimited)
}

// RetryAfter is d as Retry-After's whole seconds, rounded up, at least 1.
func RetryAfter(d time.Duration) string {
	return strconv.Itoa(int(max(1, math.Ceil(d.Seconds()))))
}
