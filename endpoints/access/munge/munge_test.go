package munge

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Outputs of munge-0.5.15's `unmunge -N -k STATUS,ENCODE_TIME,TTL,UID,GID`
// on the local cluster (the payload {"a":1}).
const (
	goodOut     = "STATUS:          0\nENCODE_TIME:     1795649397\nTTL:             300\nUID:             1001\nGID:             1002\n\n{\"a\":1}"
	replayedOut = "STATUS:          17\nENCODE_TIME:     1795649397\nTTL:             300\nUID:             0\nGID:             0\n\n{\"a\":1}"
	expiredOut  = "STATUS:          15\nUID:             0\n\n"
)

const cred = "MUNGE:AwQFAAAC3Ja2ZC+NjNnyS5fWn0Q5Zm9fQxsLPT7lnnlWmkkl8PjLR+W9WfEE:"

func TestParse(t *testing.T) {
	tests := []struct {
		name       string
		out        string
		wantStatus int
		want       Credential
		wantErr    bool
	}{
		{name: "success", out: goodOut, want: Credential{UID: 1001, GID: 1002, Encoded: time.Unix(1795649397, 0),
			TTL: 300 * time.Second, Payload: []byte(`{"a":1}`)}},
		{name: "empty payload", out: "STATUS: 0\nENCODE_TIME: 1\nTTL: 300\nUID: 0\nGID: 0\n\n",
			want: Credential{Encoded: time.Unix(1, 0), TTL: 300 * time.Second, Payload: []byte{}}},
		{name: "replayed", out: replayedOut, wantStatus: StatusReplayed},
		{name: "expired", out: expiredOut, wantStatus: StatusExpired},
		{name: "nothing printed", out: "", wantStatus: -1, wantErr: true},
		{name: "no blank line", out: "STATUS: 0\nUID: 0\n", wantStatus: -1, wantErr: true},
		{name: "a uid that is not a number", out: "STATUS: 0\nENCODE_TIME: 1\nTTL: 300\nUID: root\nGID: 0\n\n", wantErr: true},
		{name: "a field missing", out: "STATUS: 0\nENCODE_TIME: 1\nTTL: 300\nUID: 0\n\n", wantErr: true},
		{name: "a line that is not KEY: value", out: "STATUS 0\n\n", wantStatus: -1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, c, err := Parse([]byte(tt.out))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if status != tt.wantStatus {
				t.Errorf("status = %d, want %d", status, tt.wantStatus)
			}
			if d := cmp.Diff(tt.want, c); d != "" && !tt.wantErr {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran := false
			v := Verifier{Run: func(ctx context.Context, argv []string, stdin []byte) ([]byte, []byte, error) {
				ran = true
				if d := cmp.Diff([]string{"unmunge", "-N", "-k", "STATUS,ENCODE_TIME,TTL,UID,GID"}, argv); d != "" {
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
	for _, s := range []string{goodOut, replayedOut, expiredOut, "", "STATUS: 0\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		status, c, err := Parse(out)
		if err == nil && status == StatusSuccess && c.Payload == nil {
			t.Errorf("success without a payload slice: %q", out)
		}
	})
}
