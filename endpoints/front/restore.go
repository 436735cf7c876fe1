package front

import (
	"context"
	"net/http"

	"slurm-llm/endpoints/front/kvrestore"
	"slurm-llm/endpoints/kvsave"
)

// Restoring a cut conversation's KV cache before its continuation
// (package kvrestore): with [front] slot_save_dir set, the head a
// continuation goes to is first asked to restore the conversation's saved
// slot, and the continuation is pinned to it. A file restored is removed.
// Any failure (no file, another identity, no free slot, a refusal, the
// timeout) sends the continuation as before: it recomputes its prompt,
// and stays correct.

// restoreSlot asks h to restore the conversation's saved slot; it returns
// the slot restored, or -1.
func (sp *splicer) restoreSlot(h *head) int {
	cfg := sp.s.cfg.Load()
	if cfg.SlotSaveDir == "" {
		return -1
	}
	ctx, cancel := context.WithTimeout(sp.ctx, cfg.SlotRestoreTimeout)
	defer cancel()
	slot, file, err := sp.restorer.Restore(ctx, kvrestore.Request{Dir: cfg.SlotSaveDir,
		Client: &http.Client{Transport: sp.s.opts.Transport}, Addr: h.addr, Header: headerForHead(sp.c.header), File: h.file,
		Tier: sp.c.tier, Kind: sp.kind, Body: sp.c.body, Sent: sp.ans.ContinuedFrom()})
	if err != nil {
		sp.s.log.Debug("continuation without a restored slot", "tier", sp.c.tier, "head", h.addr, "error", err)
		return -1
	}
	if err := kvsave.Remove(cfg.SlotSaveDir, file); err != nil {
		sp.s.log.Warn("restored slot file not removed", "file", file, "error", err)
	}
	return slot
}

// drainSaves reports whether the draining head h saves its slots at its
// drain (kvrestore.Saves), asked once per head; then the stream is moved
// off h (or cut and held when no other head serves the model) so that its
// slot goes idle and is saved, and its continuation waits for the save
// (Restorer.AwaitSave).
func (sp *splicer) drainSaves(h *head) bool {
	if sp.savesFor != h {
		sp.savesFor, sp.saves = h, false
		if dir := sp.s.cfg.Load().SlotSaveDir; dir != "" {
			sp.saves = kvrestore.Saves(dir, h.file)
		}
	}
	if sp.saves {
		sp.restorer.AwaitSave(h.file)
	} else {
		sp.restorer.AwaitSave("")
	}
	return sp.saves
}
