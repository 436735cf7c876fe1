package elastic

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"testing"
	"time"
)

// memDir is the shared directory in memory, with the store's semantics
// (a term is created once: TakeTerm's exclusive create is tested on the
// real file system in store_test.go) and a shared file system's delay: a
// read sees the directory as it was up to maxDelay ago (NFS attribute
// caching), while creating a term is decided on the server, never stale.
type memDir struct {
	members  map[string][]version // every version written, oldest first
	terms    map[int]Term
	now      func() time.Duration
	delay    func() time.Duration
	maxDelay time.Duration
}

type version struct {
	at time.Duration
	m  Member
}

func (d *memDir) Read() (Contents, error) {
	var c Contents
	asOf := d.now() - d.delay()
	for _, vs := range d.members {
		for i := len(vs) - 1; i >= 0; i-- {
			if vs[i].at <= asOf {
				c.Members = append(c.Members, vs[i].m)
				break
			}
		}
	}
	for n, t := range d.terms {
		if n > c.Term.N && t.Created.Sub(simBase) <= asOf+time.Second { // clocks are offset up to 1 s
			c.Term = t
		}
	}
	return c, nil
}

func (d *memDir) WriteMember(m Member) error {
	if err := m.Validate(); err != nil {
		return err
	}
	d.members[m.JobID] = append(d.members[m.JobID], version{d.now(), m})
	return nil
}

func (d *memDir) TakeTerm(t Term) error {
	if _, ok := d.terms[t.N]; ok {
		return ErrTermTaken
	}
	d.terms[t.N] = t
	return nil
}

// simFiles is a member's view of the shared directory, unreachable while
// the member is cut off.
type simFiles struct {
	s   *memDir
	cut *bool
}

var errCut = errors.New("cut off from the shared file system")

func (f simFiles) Read() (Contents, error) {
	if *f.cut {
		return Contents{}, errCut
	}
	return f.s.Read()
}

func (f simFiles) WriteMember(m Member) error {
	if *f.cut {
		return errCut
	}
	return f.s.WriteMember(m)
}

func (f simFiles) TakeTerm(t Term) error {
	if *f.cut {
		return errCut
	}
	return f.s.TakeTerm(t)
}

// simMember is one member of the simulation: its agent, its clock's
// offset, and its head as the member runner would run it.
type simMember struct {
	job      string
	agent    *Agent
	offset   time.Duration
	cut      bool
	nextTick time.Duration
	gone     bool
	// leaving: when it was told it is preempted, and when it is gone.
	leaveAt, goneAt time.Duration
	headOn          bool
	headFrom        time.Duration
	// deadline is the head's lease end, on the member's clock: its shim
	// kills it then.
	deadline time.Time
	// resignAt is when a leaving leader's stopped head is gone and it may
	// say so (the runner's stop returns only then).
	resignAt time.Duration
}

type interval struct {
	job      string
	from, to time.Duration
}

// headStop is how long a head may take to be gone once its member stops
// it: a kill through srun (tier.KillMargin).
const headStop = 2 * time.Second

var simBase = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// TestAtMostOneHead runs members through random cuts, preemptions, joins,
// clock offsets (up to ±1 s) and stale reads of the shared directory (up
// to 1 s old), with the production timing (DefaultTiming), and checks that
// the heads they run never overlap: at most one head at a time, ever.
func TestAtMostOneHead(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 20
	}
	heads := 0
	for seed := 1; seed <= seeds; seed++ {
		heads += simulate(t, int64(seed))
	}
	if heads < seeds {
		t.Errorf("only %d heads in %d runs: the simulation does not exercise leadership", heads, seeds)
	}
}

// simulate runs one random scenario of 20 simulated minutes and returns
// how many heads ran.
func simulate(t *testing.T, seed int64) int {
	rng := rand.New(rand.NewSource(seed))
	tm := DefaultTiming
	var now time.Duration
	base := simBase
	store := &memDir{members: map[string][]version{}, terms: map[int]Term{}, now: func() time.Duration { return now },
		delay: func() time.Duration { return time.Duration(rng.Int63n(int64(time.Second))) }}
	var members []*simMember
	nextJob := 100
	join := func(at time.Duration) {
		m := &simMember{job: strconv.Itoa(nextJob), offset: time.Duration(rng.Int63n(int64(2*time.Second))) - time.Second, nextTick: at}
		nextJob++
		files := simFiles{s: store, cut: &m.cut}
		m.agent = NewAgent(files, Member{Tier: "reasoning", JobID: m.job, RunID: fmt.Sprintf("%016x", rng.Uint64()),
			Node: "node" + m.job, Addr: "10.78.0." + strconv.Itoa(nextJob%250+1), RPCPort: 50052, State: StateReady}, tm,
			func() time.Time { return base.Add(now + m.offset) })
		members = append(members, m)
	}
	for i := 0; i < 3; i++ {
		join(0)
	}
	var done []interval
	stopHead := func(m *simMember, at time.Duration) {
		if m.headOn {
			m.headOn = false
			done = append(done, interval{m.job, m.headFrom, at + headStop})
		}
	}
	const step = 100 * time.Millisecond
	for now = 0; now < 20*time.Minute; now += step {
		// Random events.
		switch r := rng.Intn(2000); {
		case r < 3 && len(members) < 8:
			join(now)
		case r < 6:
			m := members[rng.Intn(len(members))]
			m.cut = !m.cut
		case r < 8:
			m := members[rng.Intn(len(members))]
			if !m.gone && m.leaveAt == 0 {
				m.leaveAt, m.goneAt = now, now+time.Duration(rng.Intn(25)+1)*time.Second
				m.agent.SetState(StateLeaving, base.Add(m.goneAt+m.offset), "preempted")
			}
		}
		for _, m := range members {
			if m.gone {
				continue
			}
			if m.leaveAt != 0 && now >= m.goneAt {
				stopHead(m, now) // its job ends: everything stops
				m.gone = true
				continue
			}
			if m.headOn && !base.Add(now+m.offset).Before(m.deadline) {
				// Its shim kills the head at the lead's end, whatever the
				// member does: gone within the margin.
				m.headOn = false
				done = append(done, interval{m.job, m.headFrom, now + tm.Margin})
			}
			if now < m.nextTick {
				continue
			}
			m.nextTick = now + time.Second + time.Duration(rng.Int63n(int64(200*time.Millisecond)))
			d := m.agent.Tick()
			// As the member runner does: a head is stopped synchronously (the
			// member ticks again only once it is gone), then the member
			// resigns; a lost member without a head resigns at once.
			switch {
			case d.Lead && m.leaveAt != 0 && now-m.leaveAt > 2*time.Second, !d.Lead && m.headOn:
				stopHead(m, now)
				m.nextTick = now + headStop
				m.resignAt = m.nextTick
			case m.resignAt != 0:
				m.agent.Resign()
				m.resignAt = 0
			case d.Role == RoleLost:
				m.agent.Resign()
			case d.Lead && !m.headOn && m.leaveAt == 0:
				m.headOn, m.headFrom = true, now
			}
			if d.Lead {
				m.deadline = d.LeadEnd
			}
		}
	}
	for _, m := range members {
		stopHead(m, 20*time.Minute)
	}
	sort.Slice(done, func(i, j int) bool { return done[i].from < done[j].from })
	for i := 1; i < len(done); i++ {
		for j := 0; j < i; j++ {
			if done[j].job != done[i].job && done[j].to > done[i].from {
				t.Fatalf("seed %d: two heads at once: job %s %s–%s and job %s %s–%s", seed,
					done[j].job, done[j].from, done[j].to, done[i].job, done[i].from, done[i].to)
			}
		}
	}
	return len(done)
}
