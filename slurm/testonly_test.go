package slurm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestTestSubmit(t *testing.T) {
	// What sbatch --test-only printed on Slurm 22.05.8 (stderr, exit 0).
	const answer = "sbatch: Job 727 to start at 2026-11-23T17:35:46 using 1 processors on nodes node2 in partition gpu_ai\n"
	var argv []string
	c := &Client{Run: fakeSqueue(squeueReply{stderr: answer}, &argv), Location: time.UTC}
	got, err := c.TestSubmit(context.Background(), "/s/fast.sbatch", "--job-name=llm-fast-extra", "--no-requeue")
	if err != nil {
		t.Fatal(err)
	}
	want := StartEstimate{JobID: "727", Start: time.Date(2026, 11, 23, 17, 35, 46, 0, time.UTC),
		Nodes: []string{"node2"}, Partition: "gpu_ai"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("estimate (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"sbatch", "--test-only", "--job-name=llm-fast-extra", "--no-requeue", "/s/fast.sbatch"}, argv); d != "" {
		t.Errorf("argv (-want +got):\n%s", d)
	}

	c.Run = fakeSqueue(squeueReply{stderr: "sbatch: Job 8 to start at 2026-11-23T17:35:46 using 4 processors on nodes node[1-2] in partition p\n"}, &argv)
	if got, err := c.TestSubmit(context.Background(), "/s"); err != nil || !cmp.Equal(got.Nodes, []string{"node1", "node2"}) {
		t.Errorf("two nodes: %v, %v", got.Nodes, err)
	}
	c.Run = fakeSqueue(squeueReply{stderr: "sbatch: something else\n"}, &argv)
	if _, err := c.TestSubmit(context.Background(), "/s"); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("unreadable answer: error %v, want one that is not ErrUnavailable", err)
	}
	c.Run = fakeSqueue(squeueReply{stderr: "sbatch: error: invalid partition specified: llm\nallocation failure: Invalid partition name specified", exit: 1}, &argv)
	if _, err := c.TestSubmit(context.Background(), "/s"); err == nil || errors.Is(err, ErrUnavailable) {
		t.Errorf("refused: error %v, want one that is not ErrUnavailable", err)
	}
	c.Run = fakeSqueue(squeueReply{stderr: "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)", exit: 1}, &argv)
	if _, err := c.TestSubmit(context.Background(), "/s"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("controller down: error %v, want ErrUnavailable", err)
	}
}
