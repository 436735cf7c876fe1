package slurm

import "strings"

// TimeFormatStandard is what SLURM_TIME_FORMAT is forced to for every Slurm
// command whose output is parsed: "standard" is Slurm's "%FT%T"
// (slurm_make_time_str in src/common/parse_time.c, the same in 20.11 to
// 25.11), the only format parseSlurmTime reads (slurm/FACTS.md V10).
const TimeFormatStandard = "standard"

// envDropped are the variables a Slurm command reads that change what it
// prints for the flags this module passes, or which cluster it asks, or
// whether it returns at all (read in src/squeue/opts.c, src/scontrol/
// scontrol.c and src/sbatch/opt.c of 20.11 to 25.11; slurm/FACTS.md V11):
//   - SQUEUE_ACCOUNT, _NAMES, _LICENSES, _PARTITION, _QOS, _STATES and
//     _USERS filter the jobs listed when the flag is not given, so a job
//     asked for by id would read as gone; SQUEUE_ARRAY, _PRIORITY,
//     _FEDERATION and _SIBLING add lines; SQUEUE_SORT reorders them.
//     (SQUEUE_FORMAT and _FORMAT2 are ignored under -o/-O/-s, but squeue
//     has nothing a site needs for this module, so the prefix goes whole.)
//   - SCONTROL_ALL, _FEDERATION, _FUTURE, _LOCAL and _SIBLING change which
//     records `scontrol show` lists.
//   - SLURM_CLUSTERS (squeue, scontrol and sbatch) and SBATCH_CLUSTERS send
//     the command to another cluster: squeue -h over two clusters mixes
//     their jobs, and a job sbatch sent elsewhere would never be seen.
//   - SBATCH_WAIT makes sbatch return only when the job ends: a submit
//     would time out after the job was queued, and be tried again.
//   - SBATCH_ARRAY_INX makes the job an array, whose tasks squeue lists as
//     ID_TASK, never as the id sbatch printed.
var envDropped = map[string]bool{
	"SLURM_CLUSTERS":   true,
	"SBATCH_CLUSTERS":  true,
	"SBATCH_WAIT":      true,
	"SBATCH_ARRAY_INX": true,
}

// envDroppedPrefixes are whole families dropped (see envDropped).
var envDroppedPrefixes = []string{"SQUEUE_", "SCONTROL_"}

// CommandEnv returns environ (as os.Environ gives it) as a Slurm command
// whose output is parsed must see it: SLURM_TIME_FORMAT forced to
// "standard" over any inherited value, and the variables that change what
// squeue, scontrol or sbatch print or ask (envDropped) removed. Without it
// a SLURM_TIME_FORMAT in the keeper's or the supervisor's environment
// makes every time unreadable. Everything else (SLURM_CONF, PATH, TZ,
// sbatch's job options) is kept; sbatch passes the result on to the job.
func CommandEnv(environ []string) []string {
	env := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "SLURM_TIME_FORMAT" || dropped(name) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "SLURM_TIME_FORMAT="+TimeFormatStandard)
}

func dropped(name string) bool {
	if envDropped[name] {
		return true
	}
	for _, p := range envDroppedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
