package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// blockedEnv is set to "1" by llm-supervisor's shim in a child it starts with
// SIGTERM blocked (supervisor/shim.BlockedEnv). llama-server and rpc-server
// are C++ and keep the signal mask they inherit, so Slurm's SIGTERM stays
// pending in them. A Go program cannot see its initial mask: the runtime
// unblocks SIGTERM before main runs (measured: SigBlk is 0 in main), so the
// fake learns it from the shim instead.
const blockedEnv = "SLURM_LLM_SIGTERM_BLOCKED"

// sigtermBlocked says whether the program was started with SIGTERM blocked.
func sigtermBlocked() bool { return os.Getenv(blockedEnv) == "1" }

// holdSIGTERM makes SIGTERM do nothing, as a blocked (pending) SIGTERM does
// in the C++ programs, and logs each one so tests can see it arrived.
func holdSIGTERM(stderr io.Writer) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() {
		for range sigs {
			fmt.Fprintf(stderr, "fake-llama: SIGTERM held: it was blocked at start (%s=1)\n", blockedEnv)
		}
	}()
}

// stopSignals are the signals a server reacts to: SIGINT and SIGTERM, or
// only SIGINT when SIGTERM was blocked at start (then it is held).
func stopSignals(stderr io.Writer) []os.Signal {
	if sigtermBlocked() {
		holdSIGTERM(stderr)
		return []os.Signal{syscall.SIGINT}
	}
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT}
}
