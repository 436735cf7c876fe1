package main

import (
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/cmd/internal/journal"
)

// newLogger builds the root logger: text (default) or JSON, at a level;
// under systemd each line begins with its level's syslog priority.
func newLogger(w io.Writer, format, level string) (hclog.Logger, error) {
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return nil, fmt.Errorf("log level %q: want trace, debug, info, warn or error", level)
	}
	var json bool
	switch format {
	case "text", "":
	case "json":
		json = true
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name: "llm-supervisor", Output: journal.Wrap(w), Level: lvl, JSONFormat: json,
		TimeFormat: "2006-01-02T15:04:05.000Z07:00",
	}), nil
}
