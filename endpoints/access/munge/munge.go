// Package munge proves a cluster user's uid to the controller with the
// cluster's own MUNGE: the user's side runs `munge` (Encode) with the
// request as the credential's payload; the controller runs `unmunge`
// (Verifier.Verify), which checks it with the cluster's key and refuses a
// credential decoded before (replayed) or past its time to live. Both run
// the programs directly (no shell), bounded in time; the credential never
// goes to a log.
package munge

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
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
	c := bytes.TrimSpace(cred)
	if len(c) > MaxCredential {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxCredential)
	}
	body, ok := bytes.CutPrefix(c, []byte("MUNGE:"))
	if !ok || len(body) < 2 || body[len(body)-1] != ':' {
		return fmt.Errorf("%w: not a munge credential (want MUNGE:…:)", ErrInvalid)
	}
	for _, b := range body[:len(body)-1] {
		if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '=') {
			return fmt.Errorf("%w: not a munge credential (a byte outside base64)", ErrInvalid)
		}
	}
	return nil
}

// Parse reads what `unmunge -N -k STATUS,ENCODE_TIME,TTL,UID,GID` printed:
// "KEY: value" lines, a blank line, the payload. It returns the status
// and, when it is success, the credential; a missing or bad field is an
// error.
func Parse(out []byte) (int, Credential, error) {
	meta, payload, ok := bytes.Cut(out, []byte("\n\n"))
	if !ok {
		return -1, Credential{}, errors.New("unmunge output: no blank line after the metadata")
	}
	fields := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(meta))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			return -1, Credential{}, fmt.Errorf("unmunge output: %q is not KEY: value", sc.Text())
		}
		fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	num := func(key string, bits int) (uint64, error) {
		n, err := strconv.ParseUint(fields[key], 10, bits)
		if err != nil {
			return 0, fmt.Errorf("unmunge output: %s %q: want a number", key, fields[key])
		}
		return n, nil
	}
	status, err := num("STATUS", 8)
	if err != nil || status != StatusSuccess {
		return int(status), Credential{}, err
	}
	var c Credential
	var vals [4]uint64
	for i, k := range []string{"UID", "GID", "ENCODE_TIME", "TTL"} {
		if vals[i], err = num(k, 32); err != nil {
			return int(status), Credential{}, err
		}
	}
	c.UID, c.GID = uint32(vals[0]), uint32(vals[1])
	c.Encoded, c.TTL = time.Unix(int64(vals[2]), 0), time.Duration(vals[3])*time.Second
	c.Payload = payload
	return StatusSuccess, c, nil
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
// or ErrInvalid; unmunge not answering wraps ErrUnavailable.
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
	argv := []string{bin, "-N", "-k", "STATUS,ENCODE_TIME,TTL,UID,GID"}
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
