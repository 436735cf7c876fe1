package share

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"slurm-llm/endpoints/access/internal/execx"
)

// MinWeight is the least weight a user gets from sshare: a fair-share
// factor of 0 (a user far over their share) still gets a slot now and
// then, as a job of theirs still starts in the end.
const MinWeight = 0.01

// Assoc is a Slurm association: an account and a user in it.
type Assoc struct{ Account, User string }

// ParseSshare reads `sshare -a -n -P -o Account,User,FairShare`: one
// association a line (account rows, with no user, are skipped; account
// names are indented by their depth), the user's fair-share factor
// between 0 and 1. A line that is not three fields, or a factor that is
// not a number in [0, 1], is an error naming the line.
func ParseSshare(out []byte) (map[Assoc]float64, error) {
	m := map[Assoc]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 3 {
			return nil, fmt.Errorf("sshare line %d: want Account|User|FairShare, got %q", n, line)
		}
		acct, user, fs := strings.TrimSpace(f[0]), strings.TrimSpace(f[1]), strings.TrimSpace(f[2])
		if user == "" || fs == "" {
			continue // an account's row, or no factor (fair share not in use)
		}
		v, err := strconv.ParseFloat(fs, 64)
		if err != nil || v < 0 || v > 1 || math.IsNaN(v) {
			return nil, fmt.Errorf("sshare line %d: fair-share factor %q: want a number from 0 to 1", n, fs)
		}
		m[Assoc{acct, user}] = v
	}
	return m, sc.Err()
}

// WeightOf is a user's weight from sshare's factors: the association's
// factor (the user's highest when the account is not known or not
// theirs), at least MinWeight; a user sshare does not list gets the mean
// of the factors listed, and with none listed everyone weighs 1.
func WeightOf(factors map[Assoc]float64, user, account string) float64 {
	if len(factors) == 0 {
		return 1
	}
	if f, ok := factors[Assoc{account, user}]; ok {
		return max(f, MinWeight)
	}
	best, found, sum := 0.0, false, 0.0
	for a, f := range factors {
		sum += f
		if a.User == user && (!found || f > best) {
			best, found = f, true
		}
	}
	if !found {
		best = sum / float64(len(factors))
	}
	return max(best, MinWeight)
}

// WeightsOptions configure Weights; zero fields get defaults.
type WeightsOptions struct {
	// Sshare is the sshare binary ("sshare" from PATH).
	Sshare string
	// TTL is how long a reading is used before it is read again (5m).
	TTL time.Duration
	// Timeout bounds one sshare run (10s).
	Timeout time.Duration
	// Run runs it (nil: execx.Slurm, in slurm.CommandEnv's environment).
	Run execx.Runner
	Now func() time.Time
	Log hclog.Logger
}

// Weights gives users' weights from Slurm's fair-share factors, read with
// sshare and kept for a TTL. Weight never waits for sshare: a stale or
// missing reading is refreshed in the background while the last one (or
// equal weights) serves. Safe for concurrent use.
type Weights struct {
	opts       WeightsOptions
	mu         sync.Mutex
	factors    map[Assoc]float64
	read       time.Time // when factors were read; zero: never
	refreshing bool
}

// NewWeights returns Weights that have read nothing yet.
func NewWeights(opts WeightsOptions) *Weights {
	if opts.Sshare == "" {
		opts.Sshare = "sshare"
	}
	if opts.TTL <= 0 {
		opts.TTL = 5 * time.Minute
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Run == nil {
		opts.Run = execx.Slurm
	}
	return &Weights{opts: opts}
}

// Weight is user's weight (in account, "" when unknown) from the last
// reading; a reading older than the TTL starts a new one.
func (w *Weights) Weight(user, account string) float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.refreshing && (w.read.IsZero() || w.opts.Now().Sub(w.read) >= w.opts.TTL) {
		w.refreshing = true
		go func() { _ = w.Refresh(context.Background()) }()
	}
	return WeightOf(w.factors, user, account)
}

// Refresh reads sshare now. On failure the last reading stays (and is
// tried again after the TTL).
func (w *Weights) Refresh(ctx context.Context) error {
	argv := []string{w.opts.Sshare, "-a", "-n", "-P", "-o", "Account,User,FairShare"}
	out, err := execx.Run(ctx, w.opts.Run, w.opts.Timeout, argv, nil)
	var factors map[Assoc]float64
	if err == nil {
		factors, err = ParseSshare(out)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refreshing = false
	w.read = w.opts.Now()
	if err != nil {
		w.opts.Log.Warn("cannot read fair-share factors; keeping the last", "error", err)
		return fmt.Errorf("read fair-share factors: %w", err)
	}
	w.factors = factors
	return nil
}
