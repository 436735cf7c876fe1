package slurm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCommandEnv(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		want    []string
	}{
		{name: "nothing set: standard is added",
			environ: []string{"PATH=/usr/bin", "HOME=/root"},
			want:    []string{"PATH=/usr/bin", "HOME=/root", "SLURM_TIME_FORMAT=standard"}},
		{name: "an inherited time format is overridden",
			environ: []string{"SLURM_TIME_FORMAT=relative", "TZ=Europe/Paris"},
			want:    []string{"TZ=Europe/Paris", "SLURM_TIME_FORMAT=standard"}},
		{name: "a strftime time format is overridden",
			environ: []string{"SLURM_TIME_FORMAT=%d/%m %H:%M"},
			want:    []string{"SLURM_TIME_FORMAT=standard"}},
		{name: "squeue and scontrol variables go, whatever they are",
			environ: []string{"SQUEUE_PARTITION=gpu_vasp", "SQUEUE_FORMAT2=JobID", "SQUEUE_SORT=-i",
				"SQUEUE_ARRAY=1", "SCONTROL_FEDERATION=1", "SCONTROL_ALL=1", "SQUEUE_SOMETHING_NEW=1"},
			want: []string{"SLURM_TIME_FORMAT=standard"}},
		{name: "the cluster and sbatch's wait and array go",
			environ: []string{"SLURM_CLUSTERS=other", "SBATCH_CLUSTERS=other", "SBATCH_WAIT=1", "SBATCH_ARRAY_INX=0-3"},
			want:    []string{"SLURM_TIME_FORMAT=standard"}},
		{name: "site settings and job options stay",
			environ: []string{"SLURM_CONF=/etc/slurm/slurm.conf", "SBATCH_ACCOUNT=llm", "SBATCH_WAIT_ALL_NODES=1",
				"SLURM_JOB_ID=12", "SQUEUE=1", "SLURM_CLUSTERS_X=1"},
			want: []string{"SLURM_CONF=/etc/slurm/slurm.conf", "SBATCH_ACCOUNT=llm", "SBATCH_WAIT_ALL_NODES=1",
				"SLURM_JOB_ID=12", "SQUEUE=1", "SLURM_CLUSTERS_X=1", "SLURM_TIME_FORMAT=standard"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, CommandEnv(tt.environ)); d != "" {
				t.Errorf("CommandEnv (-want +got):\n%s", d)
			}
		})
	}
}

// fakeCommand writes an executable shell script and returns its path.
func fakeCommand(t *testing.T, name, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestClientTimesUnderSiteTimeFormat pins the failure of a keeper or
// supervisor started with SLURM_TIME_FORMAT set: scontrol printed every time
// in that format and ShowJob failed on "EligibleTime". The fake prints its
// times as slurm_make_time_str does (src/common/parse_time.c).
func TestClientTimesUnderSiteTimeFormat(t *testing.T) {
	scontrol := fakeCommand(t, "scontrol", `
case "${SLURM_TIME_FORMAT:-standard}" in
standard) at=2026-11-27T10:00:00 ;;
relative) at='Tomorr 10:00' ;;
*) at=$(date -d '2026-11-27 10:00:00' +"$SLURM_TIME_FORMAT") ;;
esac
echo "JobId=4 JobName=tier JobState=PENDING Reason=BeginTime Requeue=1 Restarts=1 ExitCode=0:0 TimeLimit=UNLIMITED EligibleTime=$at StartTime=$at EndTime=Unknown Partition=gpu_ai NodeList=(null) BatchHost=(null)"
`)
	want := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for _, format := range []string{"relative", "%d/%m %H:%M", "%s", "standard"} {
		t.Run(format, func(t *testing.T) {
			t.Setenv("SLURM_TIME_FORMAT", format)
			c := &Client{Scontrol: scontrol, Location: time.UTC}
			info, err := c.ShowJob(context.Background(), "4")
			if err != nil {
				t.Fatalf("ShowJob with SLURM_TIME_FORMAT=%q: %v", format, err)
			}
			if !info.EligibleTime.Equal(want) {
				t.Errorf("EligibleTime with SLURM_TIME_FORMAT=%q = %v, want %v", format, info.EligibleTime, want)
			}
		})
	}
}

// TestClientJobStatesUnderSqueuePartition pins the failure of a keeper
// started with SQUEUE_PARTITION set to another partition: squeue filtered
// the job asked for by id out, and JobStates reported it gone. The fake
// filters as squeue does when -p is not given (src/squeue/opts.c).
func TestClientJobStatesUnderSqueuePartition(t *testing.T) {
	squeue := fakeCommand(t, "squeue", `
if [ -n "$SQUEUE_PARTITION" ] && [ "$SQUEUE_PARTITION" != gpu_ai ]; then exit 0; fi
echo "4 RUNNING"
`)
	t.Setenv("SQUEUE_PARTITION", "gpu_vasp")
	c := &Client{Squeue: squeue}
	got, err := c.JobStates(context.Background(), []string{"4"})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]JobState{"4": JobRunning}, got); d != "" {
		t.Errorf("JobStates under SQUEUE_PARTITION=gpu_vasp (-want +got):\n%s", d)
	}
}
