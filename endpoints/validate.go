package endpoints

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// Limits on the fields of an endpoint file. They keep a file written by a
// confused or hostile job small and harmless to everything that shows it.
const (
	maxTierLen     = 32
	maxJobIDLen    = 32
	maxHostLen     = 253
	maxLabelLen    = 63
	maxModels      = 128
	maxModelLen    = 256
	maxReasonLen   = 256
	maxNodeLen     = 64
	maxRestartCnt  = 1_000_000
	maxPID         = 1 << 22
	minPort        = 1
	maxPort        = 65535
	maxLeaseLength = 24 * time.Hour
	maxInFlight    = 1_000_000
)

var (
	tierRE  = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)
	jobIDRE = regexp.MustCompile(`^[0-9]{1,20}(_[0-9]{1,10})?$`)
	nodeRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	labelRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
	runIDRE = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

// FieldError says which field of an endpoint is invalid and why. Validate
// returns one per invalid field, joined (errors.As finds each).
type FieldError struct {
	// Field is the JSON name of the field ("host", "port").
	Field string
	// Problem says, for people, what is wrong with it.
	Problem string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Validate checks every field of e against the strict rules of the format
// (FORMAT.md). It returns nil for a valid endpoint, else one *FieldError per
// invalid field, joined into one error whose message is a single line. Nothing in a file that failed
// Validate may reach nginx or a terminal.
func Validate(e Endpoint) error {
	var errs []error
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if e.Schema < MinSchemaVersion || e.Schema > SchemaVersion {
		add("schema", "unknown version %d (want %d to %d)", e.Schema, MinSchemaVersion, SchemaVersion)
	} else {
		errs = append(errs, checkV2(e)...)
	}
	if err := CheckTier(e.Tier); err != nil {
		add("tier", "%v", err)
	}
	if err := CheckJobID(e.JobID); err != nil {
		add("job_id", "%v", err)
	}
	if e.RestartCount < 0 || e.RestartCount > maxRestartCnt {
		add("restart_count", "out of range [0, %d]", maxRestartCnt)
	}
	if err := CheckHost(e.Host); err != nil {
		add("host", "%v", err)
	}
	if e.Port < minPort || e.Port > maxPort {
		add("port", "%d out of range [%d, %d]", e.Port, minPort, maxPort)
	}
	if !e.State.Valid() {
		add("state", "must be one of starting, ready, draining")
	}
	errs = append(errs, checkText(e)...)
	errs = append(errs, checkTimes(e)...)
	if len(errs) == 0 {
		return nil
	}
	return fieldErrors(errs)
}

// fieldErrors is what Validate returns: errors.Is/As see each *FieldError
// (Unwrap), and the message stays on one line for logs and status.
type fieldErrors []error

func (fe fieldErrors) Error() string {
	msgs := make([]string, len(fe))
	for i, e := range fe {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.As find each *FieldError.
func (fe fieldErrors) Unwrap() []error { return fe }

// checkText validates the free-ish text fields: reason, models, node, pid.
func checkText(e Endpoint) []error {
	var errs []error
	add := func(field, problem string) { errs = append(errs, &FieldError{Field: field, Problem: problem}) }
	if len(e.Reason) > maxReasonLen {
		add("reason", fmt.Sprintf("longer than %d bytes", maxReasonLen))
	} else if strings.IndexFunc(e.Reason, notPrintable) >= 0 {
		add("reason", "contains a control or non-printable character")
	}
	if len(e.Models) > maxModels {
		add("models", fmt.Sprintf("more than %d entries", maxModels))
	}
	// Model names are shown by status, never rendered into nginx config, so
	// any printable text is fine: llama-server aliases may hold spaces.
	for i, m := range e.Models {
		if !PrintableName(m) {
			add("models", fmt.Sprintf("entry %d: want 1-%d bytes of printable characters", i, maxModelLen))
			break
		}
	}
	if !nodeRE.MatchString(e.Node) {
		add("node", fmt.Sprintf("want 1-%d characters of [A-Za-z0-9._-]", maxNodeLen))
	}
	if e.PID <= 0 || e.PID > maxPID {
		add("pid", fmt.Sprintf("out of range [1, %d]", maxPID))
	}
	return errs
}

// checkTimes validates the timestamps: all set, and the lease after the
// heartbeat by at most maxLeaseLength (a far-future lease would pin an entry).
func checkTimes(e Endpoint) []error {
	var errs []error
	add := func(field, problem string) { errs = append(errs, &FieldError{Field: field, Problem: problem}) }
	if e.StartedAt.IsZero() {
		add("started_at", "missing")
	}
	if e.Heartbeat.IsZero() {
		add("heartbeat", "missing")
	}
	switch {
	case e.LeaseExpires.IsZero():
		add("lease_expires", "missing")
	case e.LeaseExpires.Before(e.Heartbeat):
		add("lease_expires", "before heartbeat")
	case e.LeaseExpires.Sub(e.Heartbeat) > maxLeaseLength:
		add("lease_expires", fmt.Sprintf("more than %s after heartbeat", maxLeaseLength))
	}
	return errs
}

// checkV2 validates the fields schema 2 added (both optional): absent before 2.
func checkV2(e Endpoint) []error {
	var errs []error
	add := func(field, problem string) { errs = append(errs, &FieldError{Field: field, Problem: problem}) }
	if e.Schema < 2 {
		if e.RunID != "" {
			add("run_id", "not in schema 1")
		}
		if e.InFlight != nil {
			add("in_flight", "not in schema 1")
		}
		if e.Term != 0 || e.Serving != "" {
			add("term", "term and serving are not in schema 1")
		}
		return errs
	}
	if e.Term < 0 || e.Term > maxRestartCnt {
		add("term", fmt.Sprintf("out of range [0, %d]", maxRestartCnt))
	}
	if len(e.Serving) > maxReasonLen || strings.IndexFunc(e.Serving, notPrintable) >= 0 {
		add("serving", fmt.Sprintf("want at most %d bytes of printable characters", maxReasonLen))
	}
	if e.RunID != "" && !runIDRE.MatchString(e.RunID) {
		add("run_id", "want 16 hex digits [0-9a-f]")
	}
	if e.InFlight != nil && (*e.InFlight < 0 || *e.InFlight > maxInFlight) {
		add("in_flight", fmt.Sprintf("out of range [0, %d]", maxInFlight))
	}
	return errs
}

// PrintableName reports whether a model name is acceptable: 1–256 bytes of
// printable characters (llama-server aliases may hold spaces). The same
// rule serves model names in endpoint files and in the controller's config.
func PrintableName(m string) bool {
	return m != "" && len(m) <= maxModelLen && strings.IndexFunc(m, notPrintable) < 0
}

// notPrintable reports a rune that could carry control sequences to a terminal or log.
func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

// Valid reports whether s is one of the three known states.
func (s State) Valid() bool {
	return s == StateStarting || s == StateReady || s == StateDraining
}

// CheckTier returns an error unless tier is 1–32 characters of [a-z0-9_-].
func CheckTier(tier string) error {
	if !tierRE.MatchString(tier) {
		return fmt.Errorf("tier %q: want 1-%d characters of [a-z0-9_-]", truncate(tier), maxTierLen)
	}
	return nil
}

// CheckJobID returns an error unless id is a Slurm job id: digits, or
// digits_digits for an array task.
func CheckJobID(id string) error {
	if len(id) > maxJobIDLen || !jobIDRE.MatchString(id) {
		return fmt.Errorf("job id %q: want digits or digits_digits", truncate(id))
	}
	return nil
}

// CheckHost returns an error unless host is an IP literal (v4 or v6, no zone)
// or an RFC 1123 host name. Such a host can be written into an nginx
// "server" line as is: it holds no space, ';', '}', quote or newline.
func CheckHost(host string) error {
	if host == "" {
		return errors.New("empty")
	}
	if len(host) > maxHostLen {
		return fmt.Errorf("longer than %d bytes", maxHostLen)
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.Zone() != "" {
			return fmt.Errorf("%q: IPv6 zone not allowed", truncate(host))
		}
		return nil
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if !labelRE.MatchString(label) {
			return fmt.Errorf("%q: not an IP address nor an RFC 1123 host name", truncate(host))
		}
	}
	return nil
}

// truncate shortens s for an error message so a huge field does not flood logs.
func truncate(s string) string {
	const max = 40
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
