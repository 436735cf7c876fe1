package nginx

import (
	"bytes"
	"context"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/fsutil"
	"slurm-llm/endpoints/tiers"
)

// Site is the watcher's nginx, a consumer of the core's passes
// (tiers.Consumer): from each report it renders every configured tier's
// upstream file, applies the set (nginx -t, reload only on change, the
// last good files kept on a failure: Applier) and, once nginx runs the
// new files, writes each tier's 503 body beside them (read by nginx per
// request: no reload). The zero value is not usable: use NewSite.
type Site struct {
	cfg       Config
	generator string
	runner    Runner
	log       hclog.Logger
}

// NewSite returns the nginx consumer for cfg. generator names the program
// in the files' header ("llm-upstreams v1.2.0"); a nil runner is
// ExecRunner with cfg's timeout, a nil log a null logger.
func NewSite(cfg Config, generator string, runner Runner, log hclog.Logger) *Site {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Site{generator: generator, runner: runner, log: log}
	s.SetConfig(cfg)
	return s
}

// SetConfig replaces the config (SIGHUP); a default runner follows its timeout.
func (s *Site) SetConfig(cfg Config) {
	if _, ok := s.runner.(ExecRunner); ok || s.runner == nil {
		s.runner = ExecRunner{Timeout: cfg.Timeout}
	}
	s.cfg = cfg
}

// Config returns the config in use.
func (s *Site) Config() Config { return s.cfg }

// Consume implements tiers.Consumer: rep's tiers are rendered and applied,
// and rep gets what was done (Changed, Reloaded, each tier's File and
// InSync). On an error (which wraps ErrTestFailed or ErrReloadFailed when
// nginx refused) nginx still runs the last good files, and their 503
// bodies are kept with them.
func (s *Site) Consume(ctx context.Context, rep *tiers.Report) error {
	ups := Render(Specs(rep.Views), rep.Live, RenderMeta{Generator: s.generator, Source: rep.Source})
	a := &Applier{Dir: s.cfg.OutputDir, Test: s.cfg.Test, Reload: s.cfg.Reload, Runner: s.runner, Log: s.log}
	res, err := a.Apply(ctx, ups)
	rep.Changed, rep.Reloaded = res.Changed, res.Reloaded
	s.Describe(rep, ups, err == nil)
	if err != nil {
		return err
	}
	for _, v := range rep.Views {
		path := filepath.Join(s.cfg.OutputDir, UnavailableFile(v.Tier))
		if err := fsutil.WriteFile(path, tiers.UnavailableBody(v), 0o644); err != nil {
			s.log.Warn("cannot write the 503 body", "path", path, "error", err)
		}
	}
	return nil
}

// Describe fills each of rep's tiers' File and InSync: in sync when
// applied, else when the file on disk holds what ups (rendered from rep;
// nil to render here) has.
func (s *Site) Describe(rep *tiers.Report, ups []Upstream, applied bool) {
	if ups == nil {
		ups = Render(Specs(rep.Views), rep.Live, RenderMeta{Generator: s.generator, Source: rep.Source})
	}
	byTier := map[string]Upstream{}
	for _, up := range ups {
		byTier[up.Tier] = up
	}
	for i := range rep.Tiers {
		up := byTier[rep.Tiers[i].Tier]
		rep.Tiers[i].File = filepath.Join(s.cfg.OutputDir, up.File)
		b, err := os.ReadFile(rep.Tiers[i].File)
		rep.Tiers[i].InSync = applied || (err == nil && bytes.Equal(b, up.Bytes))
	}
}

// Specs are the tiers of a pass's views as Render takes them: each routed
// as the core decided (its own servers, its backup's, or none), with the
// Retry-After of its 503.
func Specs(views []tiers.TierView) []TierSpec {
	out := make([]TierSpec, 0, len(views))
	for _, v := range views {
		ts := TierSpec{Name: v.Tier, RetryAfter: v.RetryAfter}
		if v.ServedBy != v.Tier {
			ts.Backup = v.ServedBy // "" when nothing serves it
		}
		out = append(out, ts)
	}
	return out
}
