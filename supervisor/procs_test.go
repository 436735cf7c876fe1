package supervisor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procStat is the part of /proc/PID/stat the tests read.
type procStat struct {
	pid, pgrp int
	state     string
}

// readStat reads /proc/PID/stat; ok is false when the process is gone.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	// The command name is in parentheses and may hold spaces: split after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return procStat{}, false
	}
	pgrp, _ := strconv.Atoi(f[2])
	return procStat{pid: pid, pgrp: pgrp, state: f[0]}, true
}

// alive reports whether pid is a running (not zombie) process. Zombies
// count as gone: PID 1 in some containers reaps orphans only now and then.
func alive(pid int) bool {
	st, ok := readStat(pid)
	return ok && st.state != "Z" && st.state != "X"
}

// groupMembers lists the live processes of process group pgid.
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok && st.pgrp == pgid && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
