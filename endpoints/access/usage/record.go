// Package usage keeps what every request through the front door used:
// who (user, Slurm account), where (tier, model), how it ended and how
// many tokens it took. Recorder writes the records to an SQLite database
// in the state directory (modernc.org/sqlite, pure Go) from a goroutine of
// its own, in batched transactions, so the request path only hands a
// record to a bounded channel; Summarize and WriteReport answer
// `llm-upstreams usage` from the same database, read-only; Metrics counts
// tokens and requests by account and tier for Prometheus.
package usage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	_ "modernc.org/sqlite" // the database/sql driver "sqlite"
)

// Record is one request's use.
type Record struct {
	// Time is when the request came.
	Time time.Time
	// User and Account are the identity's ("" anonymous, unknown).
	User, Account string
	// Tier and Model are what served it ("" when none did).
	Tier, Model string
	// Status is the HTTP status the client got; Outcome the front door's
	// word for how it ended (answered, rejected, cut, …).
	Status  int
	Outcome string
	// PromptTokens and CompletionTokens are what the heads reported (the
	// answer's usage, or a stream's last event; a continued stream
	// counted once, as its answer).
	PromptTokens, CompletionTokens int64
	// Held is the time it waited in the front door, Served the time from
	// its sending to a head to its end.
	Held, Served time.Duration
}

// Options configure a Recorder; zero fields get defaults.
type Options struct {
	// Batch is how many records one transaction writes at most (256);
	// Flush how long a record waits for its batch to fill (1s). A crash
	// loses at most the records not yet written: one batch.
	Batch int
	Flush time.Duration
	// Queue bounds the records waiting to be written (4096); past it a
	// record is dropped and counted.
	Queue int
	// Retention is how long records are kept (0: for ever); older ones
	// are deleted at the start and every hour.
	Retention time.Duration
	// Metrics, when set, counts every record added (kept or dropped).
	Metrics *Metrics
	Now     func() time.Time
	Log     hclog.Logger
}

// Recorder writes records to the database from its own goroutine. Add
// never blocks. Close flushes and stops it.
type Recorder struct {
	o       Options
	db      *sql.DB
	ch      chan Record
	dropped atomic.Int64 // dropped since the last write of the count
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// ErrClosed is Add's answer after Close.
var ErrClosed = errors.New("usage recorder closed")

// Open opens (creating if needed) the database at path, notes an unclean
// stop of the last recorder if there was one (its last batch may be
// lost: counted as such), deletes what is past retention, and starts the
// writer.
func Open(path string, o Options) (*Recorder, error) {
	if o.Batch <= 0 {
		o.Batch = 256
	}
	if o.Flush <= 0 {
		o.Flush = time.Second
	}
	if o.Queue <= 0 {
		o.Queue = 4096
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	db, err := openWrite(path)
	if err != nil {
		return nil, err
	}
	r := &Recorder{o: o, db: db, ch: make(chan Record, o.Queue), stop: make(chan struct{}), done: make(chan struct{})}
	if err := r.start(); err != nil {
		db.Close()
		return nil, fmt.Errorf("usage database %s: %w", path, err)
	}
	go r.run()
	return r, nil
}

// start marks the database open, counting an unclean stop if the last
// recorder left it marked, and applies retention.
func (r *Recorder) start() error {
	ctx := context.Background()
	var open string
	err := r.db.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = 'open'`).Scan(&open)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if open == "1" {
		r.o.Log.Warn("the last usage recorder did not stop cleanly: its last batch may be lost", "at_most", r.o.Batch)
		if _, err := tx.ExecContext(ctx, `INSERT INTO losses(time, records, why) VALUES (?, ?, ?)`,
			r.o.Now().UnixMilli(), -r.o.Batch, "unclean stop"); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta(key, value) VALUES ('open', '1') ON CONFLICT(key) DO UPDATE SET value = '1'`); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return r.expire()
}

// Add hands rec to the writer; false when it was dropped (the queue is
// full, or the recorder closed), which is counted.
func (r *Recorder) Add(rec Record) bool {
	if r.o.Metrics != nil {
		r.o.Metrics.Observe(rec)
	}
	select {
	case <-r.stop:
		r.drop(1)
		return false
	default:
	}
	select {
	case r.ch <- rec:
		return true
	default:
		r.drop(1)
		return false
	}
}

func (r *Recorder) drop(n int64) {
	r.dropped.Add(n)
	if r.o.Metrics != nil {
		r.o.Metrics.dropped.Add(float64(n))
	}
}

// Close writes what is queued, marks the database cleanly closed and
// closes it.
func (r *Recorder) Close() error {
	r.once.Do(func() { close(r.stop) })
	<-r.done
	_, err := r.db.Exec(`UPDATE meta SET value = '0' WHERE key = 'open'`)
	if cerr := r.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// run is the writer: it owns the database until Close.
func (r *Recorder) run() {
	defer close(r.done)
	tick := time.NewTicker(r.o.Flush)
	defer tick.Stop()
	lastExpire := r.o.Now()
	batch := make([]Record, 0, r.o.Batch)
	for {
		select {
		case rec := <-r.ch:
			if batch = append(batch, rec); len(batch) >= r.o.Batch {
				batch = r.write(batch)
			}
		case <-tick.C:
			batch = r.write(batch)
			if r.o.Retention > 0 && r.o.Now().Sub(lastExpire) >= time.Hour {
				lastExpire = r.o.Now()
				if err := r.expire(); err != nil {
					r.o.Log.Error("cannot delete old usage records", "error", err)
				}
			}
		case <-r.stop:
			for {
				select {
				case rec := <-r.ch:
					if batch = append(batch, rec); len(batch) >= r.o.Batch {
						batch = r.write(batch)
					}
				default:
					r.write(batch)
					return
				}
			}
		}
	}
}

// write writes batch and the drops counted since the last write in one
// transaction; a failure drops the batch (counted) so that the queue
// keeps moving. It returns batch emptied.
func (r *Recorder) write(batch []Record) []Record {
	dropped := r.dropped.Swap(0)
	if len(batch) == 0 && dropped == 0 {
		return batch
	}
	if err := r.insert(batch, dropped); err != nil {
		r.o.Log.Error("cannot write usage records; they are lost", "records", len(batch), "error", err)
		r.dropped.Add(dropped) // written next time, with these
		r.drop(int64(len(batch)))
	}
	return batch[:0]
}

func (r *Recorder) insert(batch []Record, dropped int64) error {
	ctx := context.Background()
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO requests(time, user, account, tier, model, status, outcome,
		prompt_tokens, completion_tokens, held_ms, served_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, x := range batch {
		if _, err := stmt.ExecContext(ctx, x.Time.UnixMilli(), x.User, x.Account, x.Tier, x.Model, x.Status, x.Outcome,
			x.PromptTokens, x.CompletionTokens, x.Held.Milliseconds(), x.Served.Milliseconds()); err != nil {
			return err
		}
	}
	if dropped > 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO losses(time, records, why) VALUES (?, ?, ?)`,
			r.o.Now().UnixMilli(), dropped, "dropped"); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// expire deletes records older than the retention.
func (r *Recorder) expire() error {
	if r.o.Retention <= 0 {
		return nil
	}
	cut := r.o.Now().Add(-r.o.Retention).UnixMilli()
	if _, err := r.db.Exec(`DELETE FROM requests WHERE time < ?`, cut); err != nil {
		return err
	}
	_, err := r.db.Exec(`DELETE FROM losses WHERE time < ?`, cut)
	return err
}
