package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// Fact 15: SIGTERM to an idle head: it cleans up and exits 0.
func TestSIGTERMIdleExits(t *testing.T) {
	head, base := startHead(t, "--fake-term-delay", "50ms")
	waitReady(t, base)
	head.signal(t, syscall.SIGTERM)
	if code := head.waitExit(t); code != 0 {
		t.Errorf("exit = %d, want 0", code)
	}
	head.waitLog(t, `cleaning up before exit\.\.\.`)
}

// Fact 15: SIGTERM while a stream is in flight cuts the stream (no [DONE]) and the head
// hangs at "cleaning up before exit..." until SIGKILL; =false makes it exit instead.
func TestSIGTERMWhileStreaming(t *testing.T) {
	tests := []struct {
		name     string
		hangFlag string
		wantHang bool
	}{
		{name: "default hangs", hangFlag: "", wantHang: true},
		{name: "hang disabled exits 0", hangFlag: "--fake-hang-on-term-while-streaming=false", wantHang: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--fake-tokens", "100000", "--fake-token-rate", "20"}
			if tt.hangFlag != "" {
				args = append(args, tt.hangFlag)
			}
			head, base := startHead(t, args...)
			waitReady(t, base)
			_, stream := startStream(t, base)
			head.signal(t, syscall.SIGTERM)
			rest, _ := io.ReadAll(stream) // ends when the stream is cut
			if strings.Contains(string(rest), "[DONE]") {
				t.Errorf("cut stream ended with [DONE]")
			}
			head.waitLog(t, `cleaning up before exit\.\.\.`)
			if !tt.wantHang {
				if code := head.waitExit(t); code != 0 {
					t.Errorf("exit = %d, want 0", code)
				}
				return
			}
			head.waitLog(t, `hanging until SIGKILL`)
			head.signal(t, syscall.SIGTERM) // a second TERM does not help either
			head.waitLog(t, `again while cleaning up`)
			if head.exited() {
				t.Fatalf("head exited after SIGTERM mid-stream, want it hung")
			}
			head.signal(t, syscall.SIGKILL)
			if sig := head.killedBy(t); sig != syscall.SIGKILL {
				t.Errorf("ended by signal %d, want SIGKILL", sig)
			}
		})
	}
}

// --fake-ignore-sigterm: the head logs the signal and keeps serving.
func TestIgnoreSIGTERM(t *testing.T) {
	head, base := startHead(t, "--fake-ignore-sigterm")
	waitReady(t, base)
	head.signal(t, syscall.SIGTERM)
	head.waitLog(t, `ignoring terminated`)
	if code, _ := get(t, base+"/health"); code != http.StatusOK {
		t.Errorf("health after ignored SIGTERM = %d, want 200", code)
	}
	if head.exited() {
		t.Errorf("head exited")
	}
}
