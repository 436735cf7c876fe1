package faketest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Real is the real llama.cpp lane's build and model (README, make e2e-real
// and bench-real): LLAMA_BIN names a build's bin directory
// (shared/tools/real-llama), LLAMA_MODEL or TINY_MODEL a model. The error
// says what is missing: the environment, or one of the files, progs
// (programs of the build: "llama-server", "ggml-rpc-server") among them.
func Real(progs ...string) (bin, model string, err error) {
	bin, model = os.Getenv("LLAMA_BIN"), os.Getenv("LLAMA_MODEL")
	if model == "" {
		model = os.Getenv("TINY_MODEL")
	}
	if bin == "" || model == "" {
		return "", "", errors.New("the real llama.cpp lane needs LLAMA_BIN and LLAMA_MODEL (or TINY_MODEL)")
	}
	paths := []string{model}
	for _, p := range progs {
		paths = append(paths, filepath.Join(bin, p))
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return "", "", fmt.Errorf("the real llama.cpp lane: %w", err)
		}
	}
	return bin, model, nil
}

// NeedReal is Real's build and model, or skips t saying why (CI has no
// llama.cpp: no registry carries it).
func NeedReal(t testing.TB, progs ...string) (bin, model string) {
	t.Helper()
	bin, model, err := Real(progs...)
	if err != nil {
		t.Skipf("%v: skipped", err)
	}
	return bin, model
}
