package front

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"slurm-llm/endpoints/front/stream"
	"slurm-llm/endpoints/kvsave"
)

// Restoring a cut conversation's KV cache before its continuation (issue
// 39): the supervisor of a draining head saved its idle slots into the
// slot save directory ([front] slot_save_dir, the tiers' [head]
// slot_save_dir), each named by its tier, its head's model identity and
// its conversation key (kvsave). Before a continuation is sent to a head,
// the front door looks for the newest file of the conversation whose
// identity is that head's (its head file, written by its supervisor),
// asks the head to restore it into a free slot and pins the continuation
// to that slot (id_slot): the head then evaluates only what the saved
// cache does not hold (measured: 1 token of 1,826, FACTS.md Q12). A file
// restored is removed. Any failure (no file, another identity, no free
// slot, a refusal, the timeout) sends the continuation as before: it
// recomputes its prompt, and stays correct.

// restoreSlot asks h to restore the conversation's saved slot; it returns
// the slot restored, or -1.
func (sp *splicer) restoreSlot(h *head) int {
	cfg := sp.s.cfg.Load()
	if cfg.SlotSaveDir == "" {
		return -1
	}
	ctx, cancel := context.WithTimeout(sp.ctx, cfg.SlotRestoreTimeout)
	defer cancel()
	slot, file, err := sp.restore(ctx, cfg.SlotSaveDir, h)
	if err != nil {
		sp.s.log.Debug("continuation without a restored slot", "tier", sp.c.tier, "head", h.addr, "error", err)
		return -1
	}
	if err := kvsave.Remove(cfg.SlotSaveDir, file); err != nil {
		sp.s.log.Warn("restored slot file not removed", "file", file, "error", err)
	}
	return slot
}

// errNoSaved: no slot of the conversation was saved for the head's model.
var errNoSaved = errors.New("no saved slot of the conversation for this head's model")

// restore finds the conversation's saved file for h and has h restore it
// into a free slot; it returns the slot and the file.
func (sp *splicer) restore(ctx context.Context, dir string, h *head) (int, string, error) {
	hd, err := kvsave.ReadHead(dir, h.file)
	if err != nil {
		return -1, "", err
	}
	if _, port, _ := net.SplitHostPort(hd.Addr); port == "" || !samePort(port, h.addr) {
		return -1, "", errors.New("the head file names another head: " + hd.Addr)
	}
	client := &http.Client{Transport: sp.s.opts.Transport}
	base, hdr := "http://"+h.addr, headerForHead(sp.c.header)
	key, err := sp.conversationKey(ctx, client, base, hdr)
	if err != nil {
		return -1, "", err
	}
	e, ok := kvsave.Find(dir, sp.c.tier, hd.Identity, key)
	if !ok && sp.awaitSave && sp.savesFor != nil {
		e, ok = awaitSaved(ctx, dir, sp.savesFor.file, sp.c.tier, hd.Identity, key)
	}
	sp.awaitSave = false
	if !ok {
		return -1, "", errNoSaved
	}
	slots, err := kvsave.Slots(ctx, client, base, hdr)
	if err != nil {
		return -1, "", err
	}
	id := freeSlot(slots)
	if id < 0 {
		return -1, "", errors.New("no free slot")
	}
	if _, err := kvsave.Action(ctx, client, base, hdr, "restore", id, e.File); err != nil {
		return -1, "", err
	}
	return id, e.File, nil
}

func samePort(port, addr string) bool {
	_, p, err := net.SplitHostPort(addr)
	return err == nil && p == port
}

// freeSlot is an idle slot, an empty one first (its cache serves no one);
// -1 when every slot is busy.
func freeSlot(slots []kvsave.Slot) int {
	idle := -1
	for _, s := range slots {
		switch {
		case s.IsProcessing:
		case s.NPromptTokens == 0:
			return s.ID
		case idle < 0:
			idle = s.ID
		}
	}
	return idle
}

// conversationKey is the key of the cut request's prompt, as the head's
// /slots showed it when it was saved: a /completion prompt as it is; chat
// messages (stream.Prompt: those before the client's own trailing
// assistant message, if any) through the head's template (/apply-template).
func (sp *splicer) conversationKey(ctx context.Context, c *http.Client, base string, hdr http.Header) (string, error) {
	prompt, msgs, err := stream.Prompt(sp.kind, sp.c.body)
	if err != nil {
		return "", err
	}
	if sp.kind.IsRaw() {
		return kvsave.Key(prompt), nil
	}
	text, err := kvsave.ApplyTemplate(ctx, c, base, hdr, msgs)
	if err != nil {
		return "", err
	}
	return kvsave.Key(text), nil
}

// drainSaves reports whether the draining head h saves its slots at its
// drain (its supervisor wrote a head file: [head] slot_save_dir), asked
// once per head; then the stream is moved off h (or cut and held when no
// other head serves the model) so that its slot goes idle and is saved,
// and its continuation waits for the save (awaitSave).
func (sp *splicer) drainSaves(h *head) bool {
	if sp.savesFor != h {
		sp.savesFor, sp.saves = h, false
		if dir := sp.s.cfg.Load().SlotSaveDir; dir != "" {
			_, err := kvsave.ReadHead(dir, h.file)
			sp.saves = err == nil
		}
	}
	sp.awaitSave = sp.saves
	return sp.saves
}

// savePoll is how often a continuation looks for the slot its old head's
// drain is saving.
const savePoll = 50 * time.Millisecond

// awaitSaved waits for the conversation's slot to be saved by the drain
// of the head the stream was moved off (its endpoint file named from):
// until it is, until that head's run ended (its head file removed: its
// saves are over, done or given up) or ctx ends.
func awaitSaved(ctx context.Context, dir, from, tier, identity, key string) (kvsave.Entry, bool) {
	t := time.NewTicker(savePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return kvsave.Entry{}, false
		case <-t.C:
		}
		_, err := kvsave.ReadHead(dir, from)
		if e, ok := kvsave.Find(dir, tier, identity, key); ok || err != nil {
			return e, ok
		}
	}
}
