// Package kvrestore restores a cut conversation's KV cache on the head
// that continues it (issue 39): the supervisor of a draining head saved
// its idle slots into the slot save directory ([front] slot_save_dir, the
// tiers' [head] slot_save_dir), each named by its tier, its head's model
// identity and its conversation key (package kvsave). Before a
// continuation is sent to a head, the newest file of the conversation
// whose identity is that head's (its head file, written by its
// supervisor) is found and the head restores it into a free slot
// (Restorer.Restore); the continuation pinned to that slot (id_slot)
// evaluates only what the saved cache does not hold (measured: 1 token of
// 1,826, FACTS.md Q12).
//
// It asks the head (/apply-template, /slots, the restore action) and reads
// the directory, nothing more: which head continues a stream, the bound on
// the time a restore takes, what a failure means (the continuation goes
// without: it recomputes its prompt, and stays correct) and removing the
// file restored are the front door's.
package kvrestore

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"slurm-llm/endpoints/front/stream"
	"slurm-llm/endpoints/kvsave"
)

// Saves reports whether the head of endpoint file saves its slots at its
// drain: its supervisor wrote its head file in dir ([head] slot_save_dir).
func Saves(dir, file string) bool {
	_, err := kvsave.ReadHead(dir, file)
	return err == nil
}

// Request is one restore: the conversation of a cut request, on the head
// that continues it.
type Request struct {
	// Dir is the slot save directory.
	Dir string
	// Client reaches the head at Addr (host:port) with Header (the
	// client's, for a head run with --api-key); File is the head's
	// endpoint file (its head file is named by it).
	Client *http.Client
	Addr   string
	Header http.Header
	File   string
	// Tier, Kind and Body are the cut request's; Sent, for a /completion
	// continued before, is the answer's text its last continuation went on
	// from (that head's prompt was Body's with it).
	Tier string
	Kind stream.Kind
	Body []byte
	Sent string
}

// ErrNoSaved: no slot of the conversation was saved for the head's model.
var ErrNoSaved = errors.New("no saved slot of the conversation for this head's model")

// Restorer restores one stream's conversation, as often as it is
// continued. It remembers the drain whose save its next lookup waits for;
// the zero value waits for none.
type Restorer struct {
	awaitFrom string
}

// AwaitSave makes the next lookup wait for the save of the draining head
// whose endpoint file is from (the stream was moved off it so that its
// slot goes idle and is saved); "" waits for none.
func (r *Restorer) AwaitSave(from string) { r.awaitFrom = from }

// Restore finds the conversation's saved file for the head and has the
// head restore it into a free slot; it returns the slot and the file. A
// lookup (made once the head and the conversation's key are known) spends
// the wait AwaitSave asked for.
func (r *Restorer) Restore(ctx context.Context, q Request) (int, string, error) {
	hd, err := kvsave.ReadHead(q.Dir, q.File)
	if err != nil {
		return -1, "", err
	}
	if _, port, _ := net.SplitHostPort(hd.Addr); port == "" || !samePort(port, q.Addr) {
		return -1, "", errors.New("the head file names another head: " + hd.Addr)
	}
	base := "http://" + q.Addr
	key, err := conversationKey(ctx, q.Client, base, q.Header, q.Kind, q.Body, q.Sent)
	if err != nil {
		return -1, "", err
	}
	e, ok := kvsave.Find(q.Dir, q.Tier, hd.Identity, key)
	if !ok && r.awaitFrom != "" {
		e, ok = awaitSaved(ctx, q.Dir, r.awaitFrom, q.Tier, hd.Identity, key)
	}
	r.awaitFrom = ""
	if !ok {
		return -1, "", ErrNoSaved
	}
	slots, err := kvsave.Slots(ctx, q.Client, base, q.Header)
	if err != nil {
		return -1, "", err
	}
	id := freeSlot(slots)
	if id < 0 {
		return -1, "", errors.New("no free slot")
	}
	if _, err := kvsave.Action(ctx, q.Client, base, q.Header, "restore", id, e.File); err != nil {
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
// /slots showed it when it was saved: a /completion prompt as it is, with
// sent after it (a head that had a continuation got the prompt with the
// text the client had then, and its drain keyed the slot by the first
// KeyBytes of that); chat messages (stream.Prompt: those before the
// client's own trailing assistant message, if any) through the head's
// template (/apply-template).
func conversationKey(ctx context.Context, c *http.Client, base string, hdr http.Header, kind stream.Kind, body []byte, sent string) (string, error) {
	prompt, msgs, err := stream.Prompt(kind, body)
	if err != nil {
		return "", err
	}
	if kind.IsRaw() {
		return kvsave.Key(prompt + sent), nil
	}
	text, err := kvsave.ApplyTemplate(ctx, c, base, hdr, msgs)
	if err != nil {
		return "", err
	}
	return kvsave.Key(text), nil
}

// savePoll is how often a lookup looks for the slot a drain is saving.
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
