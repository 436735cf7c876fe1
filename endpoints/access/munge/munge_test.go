package munge

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Outputs of munge-0.5.15's `unmunge -N -k STATUS,ENCODE_TIME,TTL,UID,GID`
// on the local cluster (the payload {"a":1}): what Verify parsed before it
// stopped passing -N, still read.
const (
	goodOut     = "STATUS:          0\nENCODE_TIME:     1795649397\nTTL:             300\nUID:             1001\nGID:             1002\n\n{\"a\":1}"
	replayedOut = "STATUS:          17\nENCODE_TIME:     1795649397\nTTL:             300\nUID:             0\nGID:             0\n\n{\"a\":1}"
	expiredOut  = "STATUS:          15\nUID:             0\n\n"
)

// realOut is munge-0.5.15's `unmunge -k STATUS,ENCODE_TIME,TTL,UID,GID` (no
// -N) on this Debian 12 machine, TZ unset (UTC), root's `echo hi | munge`.
const realOut = "STATUS:          Success (0)\nENCODE_TIME:     2026-11-27 19:03:09 +0000 (1795806189)\nTTL:             300\nUID:             root (0)\nGID:             root (0)\n\nhi\n"

const cred = "MUNGE:AwQFAAAC3Ja2ZC+NjNnyS5fWn0Q5Zm9fQxsLPT7lnnlWmkkl8PjLR+W9WfEE:"

// meta is unmunge's metadata as its display functions print it, each line
// fprintf (fp_meta, "%s:%*c%s\n", key, width - strlen (key), 0x20, value),
// then the blank line that parts it from the payload: width is 17 in 0.5.13
// (src/munge/unmunge.c at munge-0.5.13, line 583: pad = key_max_str_len + 2)
// and 16 in 0.5.14 and 0.5.15 (same file at munge-0.5.14 and -0.5.15, line
// 281: key_width = maxlen + 1), the longest key (UID_RESTRICTION) being 15.
func meta(width int, kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "%s:%*c%s\n", kv[i], width-len(kv[i]), ' ', kv[i+1])
	}
	return b.String() + "\n"
}

const (
	width13 = 17 // munge 0.5.13
	width14 = 16 // munge 0.5.14 and 0.5.15
)

// v13 is what 0.5.13 prints (it has no -N): STATUS as munge_strerror's text
// and the number (unmunge.c:588-589; the texts in src/libmunge/strerror.c),
// ENCODE_TIME as the local time "%Y-%m-%d %H:%M:%S %z" and " (%ld)"
// (:618-633), TTL as %d (:668), UID and GID as the name, "???" when there
// is none, and " (%u)" (:707-718).
func v13(status, encoded, uid, gid string) string {
	return meta(width13, "STATUS", status, "ENCODE_TIME", encoded, "TTL", "300", "UID", uid, "GID", gid)
}

// v14 is what 0.5.14 and 0.5.15 print without -N: the same values as 0.5.13
// (src/munge/unmunge.c at munge-0.5.14 and -0.5.15, display_status :643-644,
// display_encode_time :714-731, display_ttl :806, display_uid :920-922,
// display_gid :944-946), one space less of padding.
func v14(status, encoded, uid, gid string) string {
	return meta(width14, "STATUS", status, "ENCODE_TIME", encoded, "TTL", "300", "UID", uid, "GID", gid)
}

// 1506445200 is 2017-09-26 17:00:00 UTC.
const (
	localPDT = "2017-09-26 10:00:00 -0700 (1506445200)"
	localUTC = "2017-09-26 17:00:00 +0000 (1506445200)"
)

func TestParse(t *testing.T) {
	alice := Credential{UID: 1000, GID: 100, Encoded: time.Unix(1506445200, 0), TTL: 300 * time.Second, Payload: []byte(`{"a":1}`)}
	with := func(c Credential, uid, gid uint32) Credential {
		c.UID, c.GID = uid, gid
		return c
	}
	tests := []struct {
		name       string
		out        string
		wantStatus int
		want       Credential
		wantErr    string // a part of the error; "" for none
	}{
		// munge 0.5.13 (RHEL 8), which has no -N.
		{name: "0.5.13: success", out: v13("Success (0)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`, want: alice},
		{name: "0.5.13: replayed", out: v13("Replayed credential (17)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`, wantStatus: StatusReplayed},
		{name: "0.5.13: expired", out: v13("Expired credential (15)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`, wantStatus: StatusExpired},
		{name: "0.5.13: rewound", out: v13("Rewound credential (16)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`, wantStatus: StatusRewound},
		{name: "0.5.13: a uid and gid with no name (getpwuid, getgrgid NULL: \"???\")",
			out: v13("Success (0)", localPDT, "??? (54321)", "??? (54322)") + `{"a":1}`, want: with(alice, 54321, 54322)},
		{name: "0.5.13: a uid of 2^32-1 (NEWS 0.5.13: UID/GID values >= 2^31)",
			out: v13("Success (0)", localPDT, "??? (4294967295)", "??? (4294967294)") + `{"a":1}`, want: with(alice, 4294967295, 4294967294)},
		// munge 0.5.14 and 0.5.15 (Debian 12) without -N, as Verify runs them.
		{name: "0.5.14: success", out: v14("Success (0)", localUTC, "alice (1000)", "users (100)") + `{"a":1}`, want: alice},
		{name: "0.5.15: success", out: v14("Success (0)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`, want: alice},
		{name: "0.5.15: replayed", out: v14("Replayed credential (17)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`, wantStatus: StatusReplayed},
		{name: "0.5.15: as printed on this machine", out: realOut,
			want: Credential{Encoded: time.Unix(1795806189, 0), TTL: 300 * time.Second, Payload: []byte("hi\n")}},
		// munge 0.5.14 and 0.5.15 with -N (unmunge.c at both tags: :639, :710, :806, :916, :940).
		{name: "0.5.14 -N: success", out: meta(width14, "STATUS", "0", "ENCODE_TIME", "1506445200", "TTL", "300", "UID", "1000", "GID", "100") + `{"a":1}`, want: alice},
		{name: "0.5.15 -N: success (local cluster)", out: goodOut, want: Credential{UID: 1001, GID: 1002, Encoded: time.Unix(1795649397, 0),
			TTL: 300 * time.Second, Payload: []byte(`{"a":1}`)}},
		{name: "0.5.15 -N: replayed", out: replayedOut, wantStatus: StatusReplayed},
		{name: "0.5.15 -N: expired, fields left out", out: expiredOut, wantStatus: StatusExpired},
		// Names: the number is the one in the last parentheses.
		{name: "a name with spaces and parentheses", out: v14("Success (0)", localPDT, "J. (Ops) Doe (1000)", "(7) (100)") + `{"a":1}`, want: alice},
		{name: "a name of digits", out: v14("Success (0)", localPDT, "4242 (1000)", "42 (100)") + `{"a":1}`, want: alice},
		{name: "a name with a colon", out: v14("Success (0)", localPDT, "ad:alice (1000)", "users (100)") + `{"a":1}`, want: alice},
		// Payloads.
		{name: "empty payload (munge -n)", out: v13("Success (0)", localPDT, "alice (1000)", "users (100)"),
			want: Credential{UID: 1000, GID: 100, Encoded: time.Unix(1506445200, 0), TTL: 300 * time.Second, Payload: []byte{}}},
		{name: "a payload with blank lines and metadata-like lines", out: v14("Success (0)", localPDT, "alice (1000)", "users (100)") + "STATUS: 17\n\nUID: 0\n",
			want: Credential{UID: 1000, GID: 100, Encoded: time.Unix(1506445200, 0), TTL: 300 * time.Second, Payload: []byte("STATUS: 17\n\nUID: 0\n")}},
		// Malformed.
		{name: "nothing printed", out: "", wantStatus: -1, wantErr: "no blank line"},
		{name: "no blank line", out: "STATUS: 0\nUID: 0\n", wantStatus: -1, wantErr: "no blank line"},
		{name: "a line that is not KEY: value", out: "STATUS 0\n\n", wantStatus: -1, wantErr: "line 1: \"STATUS 0\" is not KEY: value"},
		{name: "a status with no number", out: meta(width14, "STATUS", "Success") + "x", wantStatus: -1, wantErr: `line 1: STATUS "Success": want a number`},
		{name: "no status", out: meta(width14, "UID", "alice (1000)"), wantStatus: -1, wantErr: "no STATUS line"},
		{name: "a uid name without its number", out: v14("Success (0)", localPDT, "alice", "users (100)"), wantErr: `line 4: UID "alice": want a number`},
		{name: "a uid number not closed", out: v14("Success (0)", localPDT, "alice (1000", "users (100)"), wantErr: `line 4: UID "alice (1000"`},
		{name: "a uid number with a letter", out: v14("Success (0)", localPDT, "alice (10x0)", "users (100)"), wantErr: `line 4: UID "alice (10x0)"`},
		{name: "a negative gid", out: v14("Success (0)", localPDT, "alice (1000)", "users (-1)"), wantErr: `line 5: GID "users (-1)"`},
		{name: "a uid past 32 bits", out: v14("Success (0)", localPDT, "??? (4294967296)", "users (100)"), wantErr: `line 4: UID "??? (4294967296)": out of range`},
		{name: "empty parentheses", out: v14("Success (0)", localPDT, "alice ()", "users (100)"), wantErr: `line 4: UID "alice ()"`},
		{name: "an empty uid", out: v14("Success (0)", localPDT, "", "users (100)"), wantErr: `line 4: UID ""`},
		{name: "an encode time without its number", out: v14("Success (0)", "2017-09-26 10:00:00 -0700", "alice (1000)", "users (100)"),
			wantErr: `line 2: ENCODE_TIME "2017-09-26 10:00:00 -0700": want a number`},
		{name: "a field missing", out: meta(width14, "STATUS", "0", "ENCODE_TIME", "1", "TTL", "300", "UID", "0"), wantErr: "no GID line"},
		{name: "a key not asked for", out: meta(width14, "STATUS", "0", "ENCODE_HOST", "node1 (10.0.0.1)"), wantStatus: -1, wantErr: `line 2: key "ENCODE_HOST" not asked for`},
		{name: "a key padded before its colon", out: "STATUS :0\n\n", wantStatus: -1, wantErr: `line 1: key "STATUS " not asked for`},
		{name: "a key repeated", out: meta(width14, "STATUS", "0", "STATUS", "0"), wantStatus: -1, wantErr: "line 2: STATUS repeated or out of order"},
		{name: "keys out of munge's order", out: meta(width14, "STATUS", "0", "UID", "0", "TTL", "300"), wantStatus: -1, wantErr: "line 3: TTL repeated or out of order"},
		{name: "a uid name holding a newline, forging a line, is refused",
			out: v14("Success (0)", localPDT, "mallory (0)\nFORGED: x (1000)", "users (100)"), wantStatus: -1, wantErr: `line 5: key "FORGED" not asked for`},
		{name: "a uid name holding a newline, forging the gid, is refused",
			out: v14("Success (0)", localPDT, "mallory (0)\nGID: root (0)\nX: (1000)", "users (100)"), wantStatus: -1, wantErr: `line 6: key "X" not asked for`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, c, err := Parse([]byte(tt.out))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
			if status != tt.wantStatus {
				t.Errorf("status = %d, want %d", status, tt.wantStatus)
			}
			if d := cmp.Diff(tt.want, c); d != "" {
				t.Errorf("credential (-want +got):\n%s", d)
			}
		})
	}
}

// exitError is a real *exec.ExitError with the given status.
func exitError(t *testing.T, code int) error {
	t.Helper()
	err := exec.Command("sh", "-c", fmt.Sprintf("exit %d", code)).Run()
	if err == nil {
		t.Fatal("sh exited 0")
	}
	return err
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name    string
		cred    string
		stdout  string
		stderr  string
		err     error
		want    Credential
		wantErr error
	}{
		{name: "good", cred: cred + "\n", stdout: goodOut, want: Credential{UID: 1001, GID: 1002, Encoded: time.Unix(1795649397, 0),
			TTL: 300 * time.Second, Payload: []byte(`{"a":1}`)}},
		{name: "good, as munge 0.5.13 prints it (RHEL 8)", cred: cred, stdout: v13("Success (0)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`,
			want: Credential{UID: 1000, GID: 100, Encoded: time.Unix(1506445200, 0), TTL: 300 * time.Second, Payload: []byte(`{"a":1}`)}},
		{name: "replayed, as munge 0.5.13 prints it", cred: cred, stdout: v13("Replayed credential (17)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`,
			err: exitError(t, 17), wantErr: ErrReplayed},
		{name: "output no version prints is refused, not taken", cred: cred, stdout: v14("Success (0)", localPDT, "alice", "users (100)"), wantErr: ErrUnavailable},
		{name: "replayed", cred: cred, stdout: replayedOut, err: exitError(t, 17), wantErr: ErrReplayed},
		{name: "expired", cred: cred, stdout: expiredOut, err: exitError(t, 15), wantErr: ErrExpired},
		{name: "rewound", cred: cred, stdout: "STATUS: 16\n\n", err: exitError(t, 16), wantErr: ErrExpired},
		{name: "bad armor: no metadata, the exit status says", cred: cred, stderr: "unmunge: Error: Failed to match armor prefix",
			err: exitError(t, 8), wantErr: ErrInvalid},
		{name: "munged down", cred: cred, stderr: "unmunge: Error: Failed to access \"/run/munge/munge.socket.2\"",
			err: exitError(t, 6), wantErr: ErrUnavailable},
		{name: "no unmunge", cred: cred, err: exec.ErrNotFound, wantErr: ErrUnavailable},
		{name: "garbage is refused before unmunge", cred: "hello", wantErr: ErrInvalid},
		{name: "a byte outside base64", cred: "MUNGE:Aw$Q:", wantErr: ErrInvalid},
		// munge's encoder leaves the unused low bits zero (src/munged/base64.c,
		// base64_encode_block, munge-0.5.15) and its decoder ignores them:
		// "MTAwMXgxMh==" is how munge writes these 7 bytes, "MTAwMXgxMi==" no
		// encoder writes, and a replay guard keyed on text took it for new.
		{name: "base64 munge never writes", cred: "MUNGE:MTAwMXgxMi==:", wantErr: ErrInvalid},
		{name: "base64 without its padding", cred: "MUNGE:MTAwMXgxMh:", wantErr: ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran := false
			v := Verifier{Run: func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
				ran = true
				// no -N: munge 0.5.13 (RHEL 8) refuses it ("Invalid option", status 1)
				if d := cmp.Diff([]string{"unmunge", "-k", "STATUS,ENCODE_TIME,TTL,UID,GID"}, argv); d != "" {
					t.Errorf("argv (-want +got):\n%s", d)
				}
				if string(stdin) != cred {
					t.Errorf("stdin = %q, want the credential", stdin)
				}
				return []byte(tt.stdout), []byte(tt.stderr), tt.err
			}}
			got, err := v.Verify(context.Background(), []byte(tt.cred))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("credential (-want +got):\n%s", d)
			}
			if tt.cred == "hello" && ran {
				t.Error("unmunge ran on garbage")
			}
		})
	}
}

func TestEncode(t *testing.T) {
	run := func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
		if d := cmp.Diff([]string{"munge"}, argv); d != "" {
			t.Errorf("argv (-want +got):\n%s", d)
		}
		if string(stdin) != "payload" {
			t.Errorf("stdin = %q", stdin)
		}
		return []byte(cred + "\n"), nil, nil
	}
	got, err := Encode(context.Background(), "", []byte("payload"), run)
	if err != nil || string(got) != cred {
		t.Errorf("Encode = %q, %v", got, err)
	}
	bad := func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
		return nil, []byte("munge: Error: Failed to access socket"), exitError(t, 6)
	}
	if _, err := Encode(context.Background(), "", nil, bad); err == nil {
		t.Error("Encode: no error when munge fails")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{goodOut, replayedOut, expiredOut, realOut, "", "STATUS: 0\n\n",
		v13("Success (0)", localPDT, "alice (1000)", "users (100)") + `{"a":1}`,
		v14("Replayed credential (17)", localUTC, "J. (Ops) Doe (1000)", "??? (100)"),
		v14("Success (0)", localPDT, "mallory (0)\nGID: root (0)", "users (100)"),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		status, c, err := Parse(out)
		if err != nil || status != StatusSuccess {
			return
		}
		if c.Payload == nil {
			t.Errorf("success without a payload slice: %q", out)
		}
		// What was read, printed again as -N would, reads the same.
		again := meta(width14, "STATUS", "0", "ENCODE_TIME", fmt.Sprint(c.Encoded.Unix()), "TTL", fmt.Sprint(int64(c.TTL/time.Second)),
			"UID", fmt.Sprint(c.UID), "GID", fmt.Sprint(c.GID)) + string(c.Payload)
		status2, c2, err := Parse([]byte(again))
		if err != nil || status2 != StatusSuccess {
			t.Fatalf("%q read from %q, printed again: status %d, %v", again, out, status2, err)
		}
		if d := cmp.Diff(c, c2); d != "" {
			t.Errorf("%q read again (-first +again):\n%s", out, d)
		}
	})
}
