package scripts

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuiltBinariesAreStatic builds the programs as `make build` does and
// fails when one has an ELF interpreter, needs a shared library or a
// versioned glibc symbol: a cgo build on Debian 12 needed GLIBC_2.32 and
// GLIBC_2.34, and would not start on Rocky 8 (glibc 2.28).
func TestBuiltBinariesAreStatic(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the programs (-short)")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dir := t.TempDir()
	cmd := exec.Command("make", "-s", "-C", "..", "build", "BINDIR="+dir)
	// The Makefile, not the caller's environment, decides: a developer with
	// CGO_ENABLED=1 exported must still get static binaries.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, name := range []string{"llm-supervisor", "llm-upstreams", "fake-llama"} {
		t.Run(name, func(t *testing.T) {
			if problems := dynamicParts(t, filepath.Join(dir, name)); len(problems) > 0 {
				t.Errorf("%s is not static: %s", name, strings.Join(problems, "; "))
			}
		})
	}
}

// dynamicParts lists what makes an ELF file depend on the host's C library.
func dynamicParts(t *testing.T, path string) []string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	var problems []string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			problems = append(problems, "has an ELF interpreter (PT_INTERP)")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		problems = append(problems, "needs "+strings.Join(libs, ", "))
	}
	if syms, err := f.ImportedSymbols(); err == nil {
		for _, s := range syms {
			if strings.HasPrefix(s.Version, "GLIBC_") {
				problems = append(problems, "needs "+s.Name+"@"+s.Version)
				break
			}
		}
	}
	return problems
}

// TestDynamicPartsSeesACgoBinary is the check's own test: a program built
// with cgo against this machine's glibc must be named dynamic, so that the
// test above cannot pass for a reason other than the binaries being static.
func TestDynamicPartsSeesACgoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program (-short)")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler: cannot build a cgo binary to compare with")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	prog := "package main\n\nimport \"os/user\"\n\nfunc main() { _, _ = user.Current() }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cgo")
	cmd := exec.Command("go", "build", "-o", bin, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=", "GO111MODULE=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with cgo: %v\n%s", err, out)
	}
	if problems := dynamicParts(t, bin); len(problems) == 0 {
		t.Error("a cgo build was taken for static")
	}
}
