#!/usr/bin/env bash
# How long Slurm itself takes to preempt, without slurm-llm: N one-node gpu_ai jobs whose only
# step exits the moment Slurm's SIGTERM reaches it, then a 3-node gpu_vasp job. Prints per cycle:
# the science job's sbatch -> the SIGTERM seen by the steps (first..last), the last step's TERM ->
# its job's end (slurmctld's _job_complete), that end -> the science job's allocation.
# Needs the local cluster (scripts/slurm-cluster.sh up [--netns]), as root, and nothing else queued.
#   scripts/preempt-latency.sh [CYCLES] [N...]      e.g. scripts/preempt-latency.sh 6 1 3
set -euo pipefail
cycles=${1:-5}; shift || true
ns=${*:-1 3}
log=/var/log/slurm/slurmctld.log
dir=$(mktemp -d /tmp/preempt-latency.XXXXXX); chmod 755 "$dir"
trap 'scancel --name=pl-probe 2>/dev/null; scancel --name=pl-vasp 2>/dev/null; rm -rf "$dir"' EXIT
cat > "$dir/step.sh" <<STEP
#!/bin/bash
trap 'date +%s.%N > $dir/term-\$SLURM_JOB_ID; exit 0' TERM
while :; do sleep 0.02; done
STEP
printf '#!/bin/bash\nsrun -n1 --overlap %s/step.sh\n' "$dir" > "$dir/job.sh"
chmod 755 "$dir/step.sh" "$dir/job.sh"
stamp() { date -d "$(grep "$1" "$log" | tail -1 | sed -E 's/^\[([^]]+)\].*/\1/')" +%s.%N; }
for n in $ns; do
	for c in $(seq 1 "$cycles"); do
		ids=()
		for k in $(seq 1 "$n"); do
			ids+=("$(sbatch --parsable -N1 -w "node$k" -p gpu_ai --exclusive --requeue -J pl-probe -o /dev/null "$dir/job.sh")")
		done
		for _ in $(seq 1 100); do [ "$(squeue -h -n pl-probe -t R | wc -l)" = "$n" ] && break; sleep 0.2; done
		sleep 1
		sci=$(sbatch --parsable -N3 -p gpu_vasp --exclusive -J pl-vasp -o /dev/null --wrap 'sleep 2')
		t0=$(date +%s.%N)
		for _ in $(seq 1 100); do grep -q "sched: Allocate JobId=$sci " "$log" && break; sleep 0.1; done
		first=; last=; end=0
		for j in "${ids[@]}"; do
			tm=$(cat "$dir/term-$j" 2>/dev/null || echo 0)
			[ -z "$first" ] || [ "$(echo "$tm < $first" | bc)" = 1 ] && first=$tm
			[ -z "$last" ] || [ "$(echo "$tm > $last" | bc)" = 1 ] && last=$tm
			e=$(stamp "_job_complete: JobId=$j done"); [ "$(echo "$e > $end" | bc)" = 1 ] && end=$e
		done
		alloc=$(stamp "sched: Allocate JobId=$sci ")
		printf 'n=%d cycle=%d  sbatch->TERM %.3f..%.3f s  TERM->job end %.3f s  job end->allocate %.3f s\n' "$n" "$c" \
			"$(echo "$first - $t0" | bc)" "$(echo "$last - $t0" | bc)" "$(echo "$end - $last" | bc)" "$(echo "$alloc - $end" | bc)"
		scancel --name=pl-probe; scancel --name=pl-vasp
		for _ in $(seq 1 100); do [ -z "$(squeue -h -n pl-probe,pl-vasp)" ] && break; sleep 0.2; done
	done
done
