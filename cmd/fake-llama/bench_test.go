package main

import (
	"syscall"
	"testing"
	"time"
)

// BenchmarkAbortAfterWorkerDeath prints how long the head takes from the request that
// finds its worker dead to its death by SIGABRT (real llama.cpp: under 0.5 s, fact 13).
func BenchmarkAbortAfterWorkerDeath(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		w, addr := startWorker(b)
		head, base := startHead(b, "--rpc", addr)
		waitReady(b, base)
		_ = syscall.Kill(w.cmd.Process.Pid, syscall.SIGKILL)
		<-w.done
		began := time.Now()
		if resp, err := postChat(base, `{"messages":[]}`); err == nil {
			resp.Body.Close()
		}
		<-head.done
		total += time.Since(began)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/abort")
}

// BenchmarkHeadReady prints how long a head with one worker takes from start to /health
// 200 (real llama.cpp with a tiny model: 0.25 s, fact 14).
func BenchmarkHeadReady(b *testing.B) {
	_, addr := startWorker(b)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		began := time.Now()
		head, base := startHead(b, "--rpc", addr)
		waitReady(b, base)
		total += time.Since(began)
		_ = syscall.Kill(-head.cmd.Process.Pid, syscall.SIGKILL)
		<-head.done
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/ready")
}
