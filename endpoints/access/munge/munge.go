// Package munge proves a cluster user's uid to the controller with the
// cluster's own MUNGE: the user's side runs `munge` (Encode) with the
// request as the credential's payload; the controller runs `unmunge`
// (Verifier.Verify), which checks it with the cluster's key and refuses a
// credential decoded before (replayed) or past its time to live. Both run
// the programs directly (no shell), bounded in time; the credential never
// goes to a log.
package munge

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"slurm-llm/endpoints/access/internal/execx"
)

// Errors a credential is refused with; Verify's errors wrap one of them.
var (
	// ErrReplayed: the credential was decoded before (munge status 17).
	ErrReplayed = errors.New("replayed credential")
	// ErrExpired: the credential is past its time to live (15), or from
	// the future (rewound, 16).
	ErrExpired = errors.New("expired credential")
	// ErrInvalid: not a credential of this cluster's key, damaged, or not
	// for this host's users (any other munge status).
	ErrInvalid = errors.New("invalid credential")
	// ErrUnavailable: unmunge could not be run or did not answer (munged
	// down, the binary missing); the credential may be good.
	ErrUnavailable = errors.New("munge unavailable")
)

// Statuses of munge(3) that Verify tells apart.
const (
	StatusSuccess  = 0
	StatusExpired  = 15
	StatusRewound  = 16
	StatusReplayed = 17
)

// MaxCredential bounds a credential read from a client: a request's
// payload of a few hundred bytes armors to well under it.
const MaxCredential = 4096

// Credential is what unmunge says about a good credential.
type Credential struct {
	// UID and GID are the encoding process's, as munged saw them.
	UID, GID uint32
	// Encoded is when it was made; TTL how long it is valid from then.
	Encoded time.Time
	TTL     time.Duration
	// Payload is what the user put in it.
	Payload []byte
}

// CheckArmor reports whether cred looks like a munge credential
// ("MUNGE:" base64 ":"), so that garbage is refused before unmunge runs.
func CheckArmor(cred []byte) error {
	_, err := Decode(cred)
	return err
}

// Decode returns the credential's bytes under its armor ("MUNGE:" base64
// ":"), decoded strictly: munge's encoder writes standard base64 with its
// padding and the unused low bits of the last character zero, but its
// decoder ignores those bits, so "MUNGE:…AB=:" and "MUNGE:…AA=:" are one
// credential to unmunge. A spelling munge never writes is refused here,
// and a replay guard keys on these bytes, never on the text.
func Decode(cred []byte) ([]byte, error) {
	c := bytes.TrimSpace(cred)
	if len(c) > MaxCredential {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxCredential)
	}
	body, ok := bytes.CutPrefix(c, []byte("MUNGE:"))
	if !ok || len(body) < 2 || body[len(body)-1] != ':' {
		return nil, fmt.Errorf("%w: not a munge credential (want MUNGE:…:)", ErrInvalid)
	}
	body = body[:len(body)-1]
	for _, b := range body {
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '=') {
			return nil, fmt.Errorf("%w: not a munge credential (a byte outside base64)", ErrInvalid)
		}
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(body)))
	n, err := base64.StdEncoding.Strict().Decode(raw, body)
	if err != nil {
		return nil, fmt.Errorf("%w: not a munge credential (base64 as munge never writes it: %v)", ErrInvalid, err)
	}
	return raw[:n], nil
}

// keys are the metadata Verify asks unmunge for (-k), in the order every
// version prints them: munge_key_t's order, whatever order -k names them in.
var keys = []string{"STATUS", "ENCODE_TIME", "TTL", "UID", "GID"}

// Parse reads what `unmunge -k STATUS,ENCODE_TIME,TTL,UID,GID` printed:
// "KEY:" padded with spaces, the value, one line each; a blank line; the
// payload. munge 0.5.13 to 0.5.15 print the values the same way, and
// 0.5.14's -N (--numeric, unknown to 0.5.13, so Verify does not pass it)
// prints bare numbers instead:
//
//	STATUS:          Success (0)                             0
//	ENCODE_TIME:     2017-09-26 10:00:00 -0700 (1506445200)  1506445200
//	TTL:             300                                     300
//	UID:             alice (1000)                            1000
//	GID:             users (100)                             100
//
// Each value's number is the whole value, or the one in its last
// parentheses: a user or group name may hold spaces and parentheses, a
// uid without one is "??? (1000)", and the local time's zone is not
// needed. It returns the status and, when it is success, the credential.
// A line that is not "KEY: value", a key not asked for, repeated or out of
// munge's order (what a name holding a newline would print), or a field
// missing or not a number is an error naming the line and key. (A group
// name holding a blank line would end the metadata early and could set
// the gid: nothing here decides by the gid.)
func Parse(out []byte) (int, Credential, error) {
	meta, payload, ok := bytes.Cut(out, []byte("\n\n"))
	if !ok {
		return -1, Credential{}, errors.New("unmunge output: no blank line after the metadata")
	}
	fields, err := parseMeta(string(meta))
	if err != nil {
		return -1, Credential{}, err
	}
	num := func(key string, bits int) (uint64, error) {
		f, ok := fields[key]
		if !ok {
			return 0, fmt.Errorf("unmunge output: no %s line", key)
		}
		n, err := number(f.value, bits)
		if err != nil {
			return 0, fmt.Errorf("unmunge output: line %d: %s %q: %w", f.line, key, cut(f.value, 64), err)
		}
		return n, nil
	}
	status, err := num("STATUS", 8)
	if err != nil {
		return -1, Credential{}, err
	}
	if status != StatusSuccess {
		return int(status), Credential{}, nil
	}
	uid, err1 := num("UID", 32)
	gid, err2 := num("GID", 32)
	enc, err3 := num("ENCODE_TIME", 63) // a time_t printed with %ld: never negative
	ttl, err4 := num("TTL", 32)
	if err := cmp.Or(err1, err2, err3, err4); err != nil {
		return StatusSuccess, Credential{}, err
	}
	return StatusSuccess, Credential{
		UID:     uint32(uid),
		GID:     uint32(gid),
		Encoded: time.Unix(int64(enc), 0),
		TTL:     time.Duration(ttl) * time.Second,
		Payload: payload,
	}, nil
}

// field is one metadata line's value and its line number (from 1).
type field struct {
	value string
	line  int
}

// parseMeta splits unmunge's metadata into its fields, each of keys at
// most once and in keys' order.
func parseMeta(meta string) (map[string]field, error) {
	fields := map[string]field{}
	next := 0 // keys[next:] may still come
	for i, line := range strings.Split(meta, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("unmunge output: line %d: %q is not KEY: value", i+1, cut(line, 64))
		}
		at := slices.Index(keys, k)
		switch {
		case at < 0:
			return nil, fmt.Errorf("unmunge output: line %d: key %q not asked for (want %s)", i+1, cut(k, 32), strings.Join(keys, ", "))
		case at < next:
			return nil, fmt.Errorf("unmunge output: line %d: %s repeated or out of order (want %s)", i+1, k, strings.Join(keys, ", "))
		}
		next = at + 1
		fields[k] = field{value: strings.TrimSpace(v), line: i + 1}
	}
	return fields, nil
}

// number reads a value as -N prints it ("1000") or as unmunge does without
// it ("alice (1000)": the number in the last parentheses, which a name
// before them cannot hold).
func number(v string, bits int) (uint64, error) {
	digits := v
	if rest, ok := strings.CutSuffix(v, ")"); ok {
		open := strings.LastIndexByte(rest, '(')
		if open < 0 {
			return 0, errors.New(`want a number or "NAME (NUMBER)"`)
		}
		digits = rest[open+1:]
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, errors.New(`want a number or "NAME (NUMBER)"`)
	}
	n, err := strconv.ParseUint(digits, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("out of range (%d bits)", bits)
	}
	return n, nil
}

// cut shortens s for an error message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// statusError is the error for a munge status other than success.
func statusError(status int) error {
	switch status {
	case StatusReplayed:
		return fmt.Errorf("%w (munge status %d)", ErrReplayed, status)
	case StatusExpired, StatusRewound:
		return fmt.Errorf("%w (munge status %d)", ErrExpired, status)
	case 1, 5, 6, 7: // snafu, no memory, socket, timeout: munged, not the credential
		return fmt.Errorf("%w (munge status %d)", ErrUnavailable, status)
	}
	return fmt.Errorf("%w (munge status %d)", ErrInvalid, status)
}

// Verifier checks credentials with unmunge. The zero value runs
// "unmunge" from PATH with a 5 s bound.
type Verifier struct {
	// Unmunge is the binary ("unmunge").
	Unmunge string
	// Timeout bounds one run (5s).
	Timeout time.Duration
	// Run runs it (nil: exec).
	Run execx.Runner
}

// Verify decodes cred. A credential refused wraps ErrReplayed, ErrExpired
// or ErrInvalid; unmunge not answering, or printing what Parse cannot
// read, wraps ErrUnavailable.
func (v Verifier) Verify(ctx context.Context, cred []byte) (Credential, error) {
	if err := CheckArmor(cred); err != nil {
		return Credential{}, err
	}
	bin, timeout := v.Unmunge, v.Timeout
	if bin == "" {
		bin = "unmunge"
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	// No -N (--numeric): munge 0.5.13, RHEL 8's, refuses it ("Invalid option").
	argv := []string{bin, "-k", strings.Join(keys, ",")}
	out, err := execx.Run(ctx, v.Run, timeout, argv, bytes.TrimSpace(cred))
	status, c, perr := Parse(out)
	switch {
	case perr == nil && status == StatusSuccess && err == nil:
		return c, nil
	case perr == nil && status > StatusSuccess:
		return Credential{}, statusError(status)
	case execx.ExitCode(err) > 0: // a refusal with no metadata (bad armor: 8)
		return Credential{}, fmt.Errorf("%w: %v", statusError(execx.ExitCode(err)), err)
	case err != nil:
		return Credential{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return Credential{}, fmt.Errorf("%w: %v", ErrUnavailable, perr)
}

// Encode runs munge (bin, "" for "munge" from PATH) with payload as the
// credential's payload and returns the credential.
func Encode(ctx context.Context, bin string, payload []byte, run execx.Runner) ([]byte, error) {
	if bin == "" {
		bin = "munge"
	}
	out, err := execx.Run(ctx, run, 10*time.Second, []string{bin}, payload)
	if err != nil {
		return nil, fmt.Errorf("make a munge credential: %w", err)
	}
	cred := bytes.TrimSpace(out)
	if err := CheckArmor(cred); err != nil {
		return nil, fmt.Errorf("make a munge credential: %w", err)
	}
	return cred, nil
}
