package slurm

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// reply is what a fake command prints and how it exits.
type reply struct {
	stdout, stderr string
	exit           int   // 0: success
	err            error // a failure to run at all, instead of exit
}

// fakeRunner answers each command with r and records the argv it got.
func fakeRunner(t *testing.T, r reply, got *[]string) Runner {
	return func(ctx context.Context, argv []string) ([]byte, []byte, error) {
		*got = argv
		if r.err != nil {
			return nil, nil, r.err
		}
		var err error
		if r.exit != 0 {
			err = exitError(t, r.exit)
		}
		return []byte(r.stdout), []byte(r.stderr), err
	}
}

// exitError returns a real *exec.ExitError with the given exit code.
func exitError(t *testing.T, code int) error {
	t.Helper()
	err := exec.Command("sh", "-c", `exit "$1"`, "sh", strconv.Itoa(code)).Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != code {
		t.Fatalf("make exit error %d: got %v", code, err)
	}
	return err
}

const (
	contactFailure = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
	invalidJob     = "slurm_load_jobs error: Invalid job id specified"
)

// errKind says which sentinel an error wraps: "no such job", "unavailable",
// "other" (Slurm refused) or "" for no error.
func errKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNoSuchJob) && errors.Is(err, ErrUnavailable):
		return "both (bug)"
	case errors.Is(err, ErrNoSuchJob):
		return "no such job"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name  string
		reply reply
		want  string
	}{
		{name: "invalid job id", reply: reply{stderr: invalidJob, exit: 1}, want: "no such job"},
		{name: "controller unreachable", reply: reply{stderr: contactFailure, exit: 1}, want: "unavailable"},
		{name: "requeue with controller unreachable", reply: reply{stderr: "Unexpected message received for job 1", exit: 1}, want: "unavailable"},
		{name: "socket timeout", reply: reply{stderr: "slurm_load_jobs error: Socket timed out on send/recv operation", exit: 1}, want: "unavailable"},
		{name: "scancel unreachable", reply: reply{stderr: "scancel: error: Kill job error on job id 1: Unable to contact slurm controller (connect failure)", exit: 8}, want: "unavailable"},
		{name: "binary missing", reply: reply{err: &exec.Error{Name: "scontrol", Err: exec.ErrNotFound}}, want: "unavailable"},
		{name: "refused", reply: reply{stderr: "Job is no longer pending execution for job 3", exit: 1}, want: "other"},
		{name: "no stderr", reply: reply{exit: 1}, want: "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var argv []string
			c := &Client{Run: fakeRunner(t, tt.reply, &argv)}
			err := c.Requeue(context.Background(), "3")
			if got := errKind(err); got != tt.want {
				t.Errorf("Requeue error %v is %q, want %q", err, got, tt.want)
			}
			if !strings.Contains(err.Error(), "requeue job 3") {
				t.Errorf("error %q does not name the operation", err)
			}
		})
	}
}

func TestClientTimeoutIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	slow := filepath.Join(dir, "scontrol")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &Client{Scontrol: slow, Timeout: 100 * time.Millisecond}
	_, err := c.ShowJob(context.Background(), "1")
	if got := errKind(err); got != "unavailable" {
		t.Errorf("ShowJob on a hung scontrol: error %v is %q, want unavailable", err, got)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
	}
}

func TestClientMissingBinaryIsUnavailable(t *testing.T) {
	c := &Client{Squeue: filepath.Join(t.TempDir(), "no-squeue")}
	_, err := c.JobStates(context.Background(), []string{"1"})
	if got := errKind(err); got != "unavailable" {
		t.Errorf("JobStates with squeue missing: error %v is %q, want unavailable", err, got)
	}
}

func TestClientArgv(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		call func(c *Client) error
		want []string
	}{
		{name: "show job", call: func(c *Client) error { _, err := c.ShowJob(ctx, "4"); return err },
			want: []string{"/s/scontrol", "-o", "show", "job", "4"}},
		{name: "requeue", call: func(c *Client) error { return c.Requeue(ctx, "4") },
			want: []string{"/s/scontrol", "requeue", "4"}},
		{name: "release now", call: func(c *Client) error { return c.ReleaseNow(ctx, "4") },
			want: []string{"/s/scontrol", "update", "JobId=4", "StartTime=now"}},
		{name: "cancel step", call: func(c *Client) error { return c.Cancel(ctx, "4.1") },
			want: []string{"/s/scancel", "4.1"}},
		{name: "submit", call: func(c *Client) error { _, err := c.Submit(ctx, "/x/tier.sbatch", "-J", "tier"); return err },
			want: []string{"/s/sbatch", "--parsable", "-J", "tier", "/x/tier.sbatch"}},
		{name: "job states", call: func(c *Client) error { _, err := c.JobStates(ctx, []string{"4", "5"}); return err },
			want: []string{"/s/squeue", "-h", "--states=all", "-j", "4,5", "-o", "%i %T"}},
		{name: "jobs by name", call: func(c *Client) error { _, err := c.JobsByName(ctx, "tier"); return err },
			want: []string{"/s/squeue", "-h", "-n", "tier", "-o", "%i %T"}},
		{name: "steps", call: func(c *Client) error { _, err := c.Steps(ctx, "4"); return err },
			want: []string{"/s/squeue", "-s", "-h", "-j", "4", "-o", "%i"}},
		{name: "node addrs", call: func(c *Client) error { _, err := c.NodeAddrs(ctx, []string{"node1", "node2", "node3"}); return err },
			want: []string{"/s/scontrol", "-o", "show", "node", "node1,node2,node3"}},
	}
	canned := reply{stdout: "4\n" + readTestdata(t, "show-job-running.txt") + readTestdata(t, "show-node.txt")}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var argv []string
			c := &Client{Scontrol: "/s/scontrol", Squeue: "/s/squeue", Sbatch: "/s/sbatch", Scancel: "/s/scancel",
				Run: fakeRunner(t, canned, &argv)}
			_ = tt.call(c) // the canned output fits some calls only; this test is about argv
			if d := cmp.Diff(tt.want, argv); d != "" {
				t.Errorf("argv (-want +got):\n%s", d)
			}
		})
	}
}

func TestZeroClientUsesPathNames(t *testing.T) {
	var argv []string
	c := &Client{Run: fakeRunner(t, reply{}, &argv)}
	_ = c.Cancel(context.Background(), "9")
	if d := cmp.Diff([]string{"scancel", "9"}, argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}
}
