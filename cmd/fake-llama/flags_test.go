package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Configs written for real llama.cpp must run unchanged against the fake.
func TestParseConfigTolerant(t *testing.T) {
	base := config{mode: modeServer, host: "127.0.0.1", port: 8080, parallel: 1, modelsMax: 4, tokenRate: 50,
		tokens: 16, termDelay: 100 * time.Millisecond, termStreamExit: 30 * time.Second,
		rpcVersion: defaultRPCVersion, hashMiBs: 900, linkMiBs: 1000, flashAttn: "auto", kvBytesPerToken: 784}
	with := func(f func(c *config)) config { c := base; f(&c); return c }
	kvDir := t.TempDir()
	tests := []struct {
		name string
		mode string
		args []string
		want config
	}{
		{name: "defaults", mode: modeServer, want: base},
		{name: "real head argv", mode: modeServer,
			args: []string{"-m", "/models/q.gguf", "--host", "10.0.0.1", "--port", "8081",
				"--rpc", "node2:50052,node3:50052", "--tensor-split", "26,27,27", "--split-mode",
				"layer", "--ctx-size", "8192", "--mlock", "--cache-type-k", "q4_0", "-ngl", "99",
				"--parallel", "2", "--timeout", "600", "--batch-size", "512", "--metrics"},
			want: with(func(c *config) {
				c.model, c.host, c.port, c.parallel, c.metrics = "/models/q.gguf", "10.0.0.1", 8081, 2, true
				c.rpc = []string{"node2:50052", "node3:50052"}
				c.tensorSplit = []float64{26, 27, 27}
			})},
		{name: "unknown --x=v ignored", mode: modeServer,
			args: []string{"--seed=3", "--port=9000", "--alias=fast"},
			want: with(func(c *config) { c.port, c.alias = 9000, "fast" })},
		{name: "unknown flag then flag is boolean", mode: modeServer,
			args: []string{"--no-kv-offload", "--port", "9001", "--flash-attn"},
			want: with(func(c *config) { c.port, c.flashAttn = 9001, "on" })},
		{name: "negative number is a value", mode: modeServer,
			args: []string{"--seed", "-1", "-n", "-2", "--alias", "a"},
			want: with(func(c *config) { c.alias = "a" })},
		{name: "positional arguments ignored", mode: modeServer,
			args: []string{"stray", "--port", "1"},
			want: with(func(c *config) { c.port = 1 })},
		{name: "fake flags", mode: modeServer,
			args: []string{"--fake-load-time", "2s", "--fake-token-rate", "5", "--fake-tokens", "3",
				"--fake-hang-on-term-while-streaming", "--fake-hang-health", "--fake-term-delay",
				"1.5", "--fake-exit-after=200ms", "--fake-ignore-sigterm", "--models-dir", "/m",
				"--models-max", "2", "--fake-term-stream-exit", "2s"},
			want: with(func(c *config) {
				c.loadTime, c.tokenRate, c.tokens, c.hangOnTermStreaming = 2*time.Second, 5, 3, true
				c.termStreamExit = 2 * time.Second
				c.hangHealth, c.termDelay, c.exitAfter = true, 1500*time.Millisecond, 200*time.Millisecond
				c.ignoreTerm, c.modelsDir, c.modelsMax = true, "/m", 2
			})},
		{name: "rpc-server flags", mode: modeRPC,
			args: []string{"-H", "0.0.0.0", "-p", "50053", "-c", "-m", "4096", "-t", "8"},
			want: with(func(c *config) { c.mode, c.host, c.port, c.cache = modeRPC, "0.0.0.0", 50053, true })},
		{name: "weights over RPC", mode: modeServer,
			args: []string{"--fake-model-mb", "64", "--fake-hash-mbps", "3200", "--fake-link-mbps", "119",
				"-ts", "3/1"},
			want: with(func(c *config) {
				c.modelMiB, c.hashMiBs, c.linkMiBs, c.tensorSplit = 64, 3200, 119, []float64{3, 1}
			})},
		{name: "rpc-server default port", mode: modeRPC,
			want: with(func(c *config) { c.mode, c.port = modeRPC, 50052 })},
		{name: "slot saving", mode: modeServer,
			args: []string{"--slot-save-path", kvDir, "-fa", "off", "--fake-kv-bytes-per-token", "10"},
			want: with(func(c *config) { c.slotSavePath, c.flashAttn, c.kvBytesPerToken = kvDir, "off", 10 })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseConfig(tt.mode, tt.args)
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			if d := cmp.Diff(tt.want, got, cmp.AllowUnexported(config{})); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "known flag missing value", args: []string{"--port"}},
		{name: "bad port", args: []string{"--port", "x"}},
		{name: "bad duration", args: []string{"--fake-load-time", "soon"}},
		{name: "bad bool", args: []string{"--fake-hang-health=maybe"}},
		{name: "bad split", args: []string{"--tensor-split", "1,x"}},
		{name: "negative split", args: []string{"--tensor-split", "1,-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseConfig(modeServer, tt.args); err == nil {
				t.Errorf("parseConfig(%q) = nil error, want one", tt.args)
			}
		})
	}
}

func TestSelectMode(t *testing.T) {
	tests := []struct {
		name     string
		argv     []string
		wantMode string
		wantArgs []string
		wantErr  bool
	}{
		{name: "first arg rpc-server", argv: []string{"/bin/fake-llama", "rpc-server", "-p", "1"},
			wantMode: modeRPC, wantArgs: []string{"-p", "1"}},
		{name: "first arg server", argv: []string{"fake-llama", "server", "--port", "1"},
			wantMode: modeServer, wantArgs: []string{"--port", "1"}},
		{name: "symlink ggml-rpc-server", argv: []string{"/x/ggml-rpc-server", "-p", "1"},
			wantMode: modeRPC, wantArgs: []string{"-p", "1"}},
		{name: "symlink rpc-server", argv: []string{"rpc-server"}, wantMode: modeRPC, wantArgs: []string{}},
		{name: "symlink llama-server", argv: []string{"/opt/llama-server", "-m", "m.gguf"},
			wantMode: modeServer, wantArgs: []string{"-m", "m.gguf"}},
		{name: "no mode", argv: []string{"fake-llama"}, wantErr: true},
		{name: "bad mode", argv: []string{"fake-llama", "cli"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mode, args, err := selectMode(tt.argv)
			if (err != nil) != tt.wantErr {
				t.Fatalf("selectMode error = %v, want error %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.wantMode, mode); d != "" {
				t.Errorf("mode (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantArgs, args); !tt.wantErr && d != "" {
				t.Errorf("args (-want +got):\n%s", d)
			}
		})
	}
}
