package fronttest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PlaywrightCore is the version of the npm package "playwright-core" the
// browser harness installs (it needs node 20 or later); it drives the
// system's Chromium (Debian's package "chromium"), never a browser of its
// own.
const PlaywrightCore = "1.64.1"

//go:embed testdata/ui_chat.mjs
var uiChat []byte

//go:embed testdata/ui_probe.mjs
var uiProbe []byte

// Browser opens pages in headless Chromium as a person would: it clicks
// and types, and reads the page's DOM (testdata/ui_chat.mjs).
type Browser struct {
	node, script, probe, chromium string
}

// NeedBrowser returns the harness, installing playwright-core at its first
// use on this machine. Without Chromium, node 20 or npm the test is skipped
// with a message naming the package, except under CI (CI set), where it
// fails: .ci/run installs them.
func NeedBrowser(t testing.TB) *Browser {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + ": the browser check needs Debian's chromium, and node 20 or later with npm (apt-get install chromium nodejs npm)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		missing("no chromium")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("no node")
	}
	if v, err := exec.Command(node, "-p", "process.versions.node.split('.')[0]").Output(); err != nil {
		missing("node does not run")
	} else if major, _ := strconv.Atoi(strings.TrimSpace(string(v))); major < 20 {
		missing("node " + strings.TrimSpace(string(v)) + " is older than 20")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing("no npm")
	}
	dir, err := installNpm(npm, "playwright-core", PlaywrightCore)
	if err != nil {
		missing(err.Error())
	}
	b := &Browser{node: node, script: filepath.Join(dir, "ui_chat.mjs"), probe: filepath.Join(dir, "ui_probe.mjs"),
		chromium: chromium}
	for path, want := range map[string][]byte{b.script: uiChat, b.probe: uiProbe} {
		if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b
}

// installNpm installs pkg@version into <user cache>/slurm-llm/pkg-version
// once (a temporary directory renamed into place) and returns it.
func installNpm(npm, pkg, version string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	root := filepath.Join(cache, "slurm-llm")
	dir := filepath.Join(root, pkg+"-"+version)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("install %s: %w", pkg, err)
	}
	tmp, err := os.MkdirTemp(root, pkg+"-*")
	if err != nil {
		return "", fmt.Errorf("install %s: %w", pkg, err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", tmp, pkg+"@"+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install %s@%s: %w\n%s", pkg, version, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !errors.Is(err, os.ErrExist) {
		if _, serr := os.Stat(filepath.Join(dir, "node_modules", pkg)); serr != nil {
			return "", fmt.Errorf("install %s: %w", pkg, err)
		}
	}
	return dir, nil
}

// PageChat is what the browser saw of one chat through the page.
type PageChat struct {
	Title  string   `json:"title"`
	Models []string `json:"models"`
	Props  string   `json:"props"`
	Status string   `json:"status"` // "1" when the stream ended, "error" when the page said so
	Answer string   `json:"answer"`
	Error  string   `json:"error"`
}

// Chat opens url, sends a message to model through the page, and saves a
// screenshot at shot.
func (b *Browser) Chat(url, model, shot string) (PageChat, error) {
	var pc PageChat
	if err := b.run(b.script, &pc, url, model, shot); err != nil {
		return pc, err
	}
	if pc.Error != "" {
		return pc, errors.New(pc.Error)
	}
	return pc, nil
}

// PageUse is what the browser saw of a person using a chat page it does
// not know the markup of (llama-server's own UI): every answer the page
// got ("GET /props 200"), the page's script errors, and its text once the
// chat's answer ended.
type PageUse struct {
	Title     string   `json:"title"`
	Responses []string `json:"responses"`
	Errors    []string `json:"errors"`
	Listed    string   `json:"listed"`
	ChatModel string   `json:"chatModel"`
	Text      string   `json:"text"`
	Error     string   `json:"error"`
}

// Use opens url, picks model in the page's model picker (unless ""),
// sends message through its message box, waits for the answer, and saves
// a screenshot at shot.
func (b *Browser) Use(url, model, message, shot string) (PageUse, error) {
	var pu PageUse
	args := []string{url, message, shot}
	if model != "" {
		args = append(args, model)
	}
	if err := b.run(b.probe, &pu, args...); err != nil {
		return pu, err
	}
	if pu.Error != "" {
		return pu, errors.New(pu.Error)
	}
	return pu, nil
}

// run runs script with args under node and reads its last output line,
// one JSON object, into v.
func (b *Browser) run(script string, v any, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.node, append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), "CHROMIUM="+b.chromium)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("node %s: %w: %s", filepath.Base(script), err, strings.TrimSpace(stderr.String()))
	}
	line := out[bytes.LastIndexByte(bytes.TrimRight(out, "\n"), '\n')+1:]
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("the script's output %q: %w", out, err)
	}
	return nil
}
