package cloud

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/enidnet/enid/internal/clock"
)

// limiter is the one gate every call of a Client passes, retries included
// (the service counts them). It holds one policy (docs/cloud.md, "Pacing"):
//
//   - the configured rate and burst (RateLimit.QPS, Burst), never exceeded,
//     and the per-action buckets (RateLimit.PerAction);
//   - a learned rate, at most the configured one: the ECS limit is the
//     account's, shared by every node, and no node knows its share. A
//     throttling episode (a refusal of a call granted after the last one
//     began) starts a shared backoff: no call of the client goes before it
//     ends. At most once a second an episode also cuts the rate: by a
//     third, or by up to half when most of the node's own recent answers
//     were refusals, down to a floor. Successes raise it additively (the
//     same calls per second for every node: nodes that share an account
//     converge to equal shares). Once the evidence is stale (a few of the
//     node's usual intervals between episodes without one), the rate
//     doubles every second up to the rate the last cut started from, and
//     after as long again up to the configured rate: a node refused for a
//     few seconds is back within seconds, while the nodes of a fleet that
//     keeps the account busy, each refused every so often, stay near
//     their share. A node none of whose calls succeeded for 10 s may call
//     at 1 call/s whatever it learned (the floor, 0.1/s, is for nodes that
//     are served: at it a starved node's join would take minutes);
//   - priority: calls at Normal priority (what a waiting pod needs, and
//     the agent's reads) are granted before Optional ones (topping up the
//     pool, releasing surplus), first come first served within a class.
//
// The policy is a pure state machine over explicit times (the *Locked
// methods, driven by the fleet simulation in limit_sim_test.go on virtual
// time); wait is the thin blocking shell the client uses.
type limiter struct {
	clk clock.Clock
	// ceiling is the configured rate in calls per second (<= 0: no rate
	// limit, and no rate to learn; the backoff after throttling still
	// holds). burst is the configured bucket size.
	ceiling, burst float64
	// floor is the lowest learned rate: min(ceiling, limitFloor).
	floor float64
	// backoff bounds the shared backoff after a throttling episode: the
	// first, and the cap (the retry policy's BaseDelay and MaxDelay).
	backoffBase, backoffMax time.Duration
	// perAction holds the configured per-action buckets; read-only after
	// newLimiter.
	perAction map[string]*bucket

	mu sync.Mutex // guards the fields below
	// rng draws the backoff's jitter.
	rng *rand.Rand
	// rate is the learned rate (calls per second) as set at since; the
	// rate now also counts the growth since (rateLocked). known is the
	// rate the last cut started from; calm is when the last episode began,
	// and gap the usual time between episodes (a moving average).
	rate, known float64
	since, calm time.Time
	gap         time.Duration
	// cut is when the rate was last cut (at most once per limitEpisode).
	cut time.Time
	// starving is when the refusals since the last success began (zero:
	// the last answer was a success, or none came).
	starving time.Time
	// tokens (may be negative: granted ahead of a slept wait on a clock
	// that did not move) at last.
	tokens float64
	last   time.Time
	// hold: no call is granted before it (the shared backoff). level
	// counts episodes not yet worked off by successes.
	hold  time.Time
	level int
	// recent holds the node's last answers (refused or not), for the
	// share refused.
	recent [16]answer
	nextAt int
	// queue holds the waiting calls: Normal before Optional, then by
	// arrival. Only the head may be granted.
	queue []*waiter
	seq   uint64
	// gen counts changes that can move the head's grant time; a head that
	// slept for a grant time computed at an older gen computes it again.
	gen uint64
}

// The policy's constants (docs/cloud.md, "Pacing"), tuned on the virtual
// fleets of limit_sim_test.go.
const (
	// limitFloor (calls per second) is the lowest a learned rate falls.
	// Below the account's share per node of a large fleet (a thousand
	// nodes on 200 calls/s: 0.2), or that fleet could not settle; a node
	// left there when the refusals stop is back at its configured rate
	// within about ten seconds of doubling.
	limitFloor = 0.1
	// limitCut is the least share refused an episode is weighed as: it
	// always cuts the rate by a third (1 - limitCut/2), and by up to half
	// when more of the node's recent answers were refusals.
	limitCut = 0.7
	// limitCareful x the configured rate is the additive growth per second
	// of a node calling at its rate (0.01 calls/s a second at 10/s).
	limitCareful = 0.001
	// limitFastDoubling is how long the rate takes to double once the
	// evidence is stale.
	limitFastDoubling = time.Second
	// The evidence of an episode is stale limitRuns times the node's usual
	// time between episodes after it, at least limitQuiet and at most
	// limitForget.
	limitRuns   = 3
	limitQuiet  = time.Second
	limitForget = time.Minute
	// limitEpisode: the rate is cut at most once per limitEpisode (each
	// episode still starts a backoff): the refusals of a short storm are
	// one piece of evidence, not one per call.
	limitEpisode = time.Second
	// A node none of whose calls succeeded for limitStarve may call at
	// limitStarveRate (at most its configured rate) whatever it learned: a
	// node that gets nothing learns nothing, and at the floor its dozen
	// join calls would take two minutes.
	limitStarve     = 10 * time.Second
	limitStarveRate = 1.0
	// limitWindow bounds the answers that give the share refused (at most
	// the last len(limiter.recent)).
	limitWindow = 10 * time.Second
)

// answer is one call's outcome, for the share refused.
type answer struct {
	at      time.Time
	refused bool
}

// outcome is what a granted call came back with (see report).
type outcome int

const (
	// answeredOK: the call succeeded.
	answeredOK outcome = iota
	// answeredThrottled: the API refused the call for a rate limit.
	answeredThrottled
	// answeredOther: any other answer (a business error, a 5xx).
	answeredOther
)

// waiter is one call waiting for its grant.
type waiter struct {
	prio Priority
	seq  uint64
	// granted is set (under the limiter's lock) when the call may go, at
	// grantedAt; kick (capacity 1) tells the waiter that it was granted or
	// that it became the head, or that the head's grant time moved.
	granted   bool
	grantedAt time.Time
	kick      chan struct{}
}

// ticket is what wait returns and report takes back: when the call was
// granted (a refusal of a call granted before the last episode began
// belongs to that episode).
type ticket struct{ at time.Time }

func newLimiter(rl RateLimit, backoffBase, backoffMax time.Duration, clk clock.Clock, rng *rand.Rand) *limiter {
	if rng == nil {
		rng = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	l := &limiter{clk: clk, ceiling: rl.QPS, burst: float64(max(1, rl.Burst)), backoffBase: backoffBase, backoffMax: backoffMax,
		perAction: map[string]*bucket{}, rng: rng}
	l.floor = min(l.ceiling, limitFloor)
	l.rate, l.tokens = l.ceiling, l.burst
	for action, r := range rl.PerAction {
		l.perAction[action] = newBucket(r.QPS, r.Burst)
	}
	return l
}

func (l *limiter) limited() bool { return l.ceiling > 0 }

// wait blocks until a call of action at priority p may be sent, or ctx
// ends. It returns the ticket to report the answer with.
func (l *limiter) wait(ctx context.Context, action string, p Priority) (ticket, error) {
	if b := l.perAction[action]; b != nil {
		// A sub-stream's own cap, taken first: a call held by it does not
		// hold up the others' queue. A token taken by a call whose ctx
		// then ends is not given back: the bucket errs on the side of
		// calling less.
		if err := l.clk.Sleep(ctx, b.reserve(l.clk.Now())); err != nil {
			return ticket{}, err
		}
	}
	l.mu.Lock()
	w := l.enqueueLocked(p)
	l.mu.Unlock()
	for {
		l.mu.Lock()
		if w.granted {
			l.mu.Unlock()
			return ticket{at: w.grantedAt}, nil
		}
		now := l.clk.Now()
		var timer <-chan time.Time
		gen := l.gen
		// A timer, stopped when the wait ends otherwise (a kick, ctx), not
		// After: one left armed would keep a virtual clock's waiter count
		// (what a simulation waits on) wrong until it fired.
		var t clock.Timer
		if l.headLocked() == w {
			at := l.grantAtLocked(now)
			if !at.After(now) {
				l.takeLocked(now)
				l.mu.Unlock()
				return ticket{at: w.grantedAt}, nil
			}
			t = l.clk.NewTimer(at.Sub(now))
			timer = t.C()
		}
		l.mu.Unlock()
		stop := func() {
			if t != nil {
				t.Stop()
			}
		}
		select {
		case <-ctx.Done():
			stop()
			l.mu.Lock()
			granted := w.granted
			if !granted {
				l.removeLocked(w)
			}
			l.mu.Unlock()
			if granted {
				// Granted as the context ended: the call may still go; the
				// caller's attempt sees the context and stops.
				return ticket{at: w.grantedAt}, nil
			}
			return ticket{}, ctx.Err()
		case <-w.kick:
			stop()
		case <-timer:
			// The head slept until its grant time: it goes, unless the
			// time moved meanwhile (a refusal, a call of higher priority).
			// Trusting the sleep keeps a clock that does not move (tests)
			// from looping.
			l.mu.Lock()
			if !w.granted && l.headLocked() == w && l.gen == gen {
				l.takeLocked(l.clk.Now())
			}
			l.mu.Unlock()
		}
	}
}

// report records the answer to a call granted with t.
func (l *limiter) report(t ticket, o outcome) {
	l.mu.Lock()
	l.reportLocked(l.clk.Now(), t, o)
	l.mu.Unlock()
}

// optionalAt is when an optional call asked for now would be granted:
// zero when it would go at once; later while the shared backoff runs or
// the calls queued ahead and the learned rate make it wait. The agent
// holds optional work until then, rather than have it wait in the client.
func (l *limiter) optionalAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clk.Now()
	if at := l.optionalAtLocked(now); at.After(now) {
		return at
	}
	return time.Time{}
}

// learned is the learned rate now (calls per second; 0 without a limit).
func (l *limiter) learned() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rateLocked(l.clk.Now())
}

// The policy, with mu held and the time given.

// enqueueLocked queues a call at priority p: after every call of its
// class or a higher one, before any of a lower one.
func (l *limiter) enqueueLocked(p Priority) *waiter {
	l.seq++
	w := &waiter{prio: p, seq: l.seq, kick: make(chan struct{}, 1)}
	i := len(l.queue)
	for i > 0 && l.queue[i-1].prio > p {
		i--
	}
	l.queue = append(l.queue, nil)
	copy(l.queue[i+1:], l.queue[i:])
	l.queue[i] = w
	if i == 0 {
		l.changedLocked()
	}
	return w
}

// headLocked is the call granted next (nil: none waits).
func (l *limiter) headLocked() *waiter {
	if len(l.queue) == 0 {
		return nil
	}
	return l.queue[0]
}

// grantAtLocked is when the head may go: after the shared backoff, and
// when the learned rate has a token for it.
func (l *limiter) grantAtLocked(now time.Time) time.Time {
	return l.afterLocked(now, 1)
}

// afterLocked is when n more calls than are granted may go, the n-th of
// them last.
func (l *limiter) afterLocked(now time.Time, n int) time.Time {
	at := now
	if l.hold.After(at) {
		at = l.hold
	}
	if !l.limited() {
		return at
	}
	l.refillLocked(now)
	if need := float64(n) - l.tokens; need > 0 {
		if t := now.Add(seconds(need / l.rateLocked(now))); t.After(at) {
			at = t
		}
	}
	return at
}

// takeLocked grants the head at now: it takes a token (into debt if its
// wait was slept on a clock that did not move) and tells the next head.
func (l *limiter) takeLocked(now time.Time) {
	w := l.queue[0]
	l.queue = l.queue[1:]
	if l.limited() {
		l.refillLocked(now)
		l.tokens--
	}
	w.granted, w.grantedAt = true, now
	notify(w.kick)
	l.changedLocked()
}

// removeLocked drops a call whose caller gave up.
func (l *limiter) removeLocked(w *waiter) {
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			if i == 0 {
				l.changedLocked()
			}
			return
		}
	}
}

// changedLocked says that the head, or its grant time, may have changed:
// the head computes its grant time again.
func (l *limiter) changedLocked() {
	l.gen++
	if h := l.headLocked(); h != nil {
		notify(h.kick)
	}
}

// reportLocked learns from the answer to a call granted with t.
func (l *limiter) reportLocked(now time.Time, t ticket, o outcome) {
	l.recent[l.nextAt] = answer{at: now, refused: o == answeredThrottled}
	l.nextAt = (l.nextAt + 1) % len(l.recent)
	switch o {
	case answeredOK:
		l.starving = time.Time{}
		l.level = max(0, l.level-1)
		if l.limited() && l.rate < l.ceiling {
			l.refillLocked(now)
			// Additive (limitCareful x ceiling per second at any rate, for
			// a node calling at its rate): nodes that share an account
			// converge to equal shares.
			r := l.rateLocked(now)
			l.rate, l.since = min(l.ceiling, r+limitCareful*l.ceiling/r), now
			l.changedLocked()
		}
		return
	case answeredOther:
		return
	}
	if l.starving.IsZero() {
		l.starving = now
	}
	if t.at.Before(l.calm) {
		// Granted before the current episode began: the same evidence.
		return
	}
	if l.limited() {
		l.refillLocked(now)
		r := l.learnedLocked(now) // not a starving node's allowance
		l.rate, l.since = r, now
		if l.cut.IsZero() || now.Sub(l.cut) >= limitEpisode {
			l.known, l.cut = r, now
			l.rate = max(l.floor, r*(1-max(limitCut, l.refusedLocked(now))/2))
		}
		// Saved-up tokens go: a refused fleet must not come back in a burst.
		l.tokens = min(l.tokens, 0)
	}
	if !l.calm.IsZero() {
		g := now.Sub(l.calm)
		if l.gap == 0 {
			l.gap = g
		}
		l.gap += (g - l.gap) / 4
	}
	l.calm = now
	d := l.backoffBase
	for i := 0; i < l.level && d < l.backoffMax; i++ {
		d *= 2
	}
	d = min(d, l.backoffMax)
	l.level++
	half := d / 2
	l.hold = now.Add(half + time.Duration(l.rng.Int64N(int64(half)+1)))
	l.changedLocked()
}

// jitter draws a duration in [0, d] from the limiter's source (the
// client's Config.Rand), for the retry backoff's jitter.
func (l *limiter) jitter(d time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Duration(l.rng.Int64N(int64(d) + 1))
}

// staleAfterLocked is how long after an episode its evidence is old: a
// few times the node's usual time between episodes (at least limitQuiet,
// at most limitForget). A node alone whose calls were refused for a few
// seconds recovers seconds after; nodes of a fleet that keeps its account
// busy, refused every minute or so, stay careful.
func (l *limiter) staleAfterLocked() time.Duration {
	return min(limitForget, max(limitQuiet, time.Duration(limitRuns*float64(l.gap))))
}

// refusedLocked is the share of the node's answers within limitWindow of
// now (at most the last len(recent)) that were refusals.
func (l *limiter) refusedLocked(now time.Time) float64 {
	n, refused := 0, 0
	for _, a := range l.recent {
		if a.at.IsZero() || now.Sub(a.at) > limitWindow {
			continue
		}
		n++
		if a.refused {
			refused++
		}
	}
	if n == 0 {
		return 1
	}
	return float64(refused) / float64(n)
}

// optionalAtLocked: see optionalAt. An optional call goes after every
// call queued now.
func (l *limiter) optionalAtLocked(now time.Time) time.Time {
	return l.afterLocked(now, len(l.queue)+1)
}

// rateLocked is the learned rate at now (0 without a limit): the rate set
// at since, and once the evidence of the last episode is stale, doubling
// every limitFastDoubling up to the rate the last cut started from, and
// from twice as long after it up to the ceiling; at least limitStarveRate
// while the node is starving.
func (l *limiter) rateLocked(now time.Time) float64 {
	if !l.limited() {
		return 0
	}
	r := l.learnedLocked(now)
	if !l.starving.IsZero() && now.Sub(l.starving) >= limitStarve {
		r = max(r, min(l.ceiling, limitStarveRate))
	}
	return r
}

// learnedLocked is rateLocked without the starving node's allowance.
func (l *limiter) learnedLocked(now time.Time) float64 {
	if l.rate >= l.ceiling || l.calm.IsZero() {
		return l.rate
	}
	stale := l.staleAfterLocked()
	fast := limitFastDoubling.Seconds()
	r := l.rate
	// Up to the rate the last cut started from, from stale after it.
	from := later(l.calm.Add(stale), l.since)
	if r < l.known {
		if !now.After(from) {
			return r
		}
		reach := from.Add(seconds(fast * math.Log2(l.known/r)))
		if now.Before(reach) {
			return min(l.ceiling, r*math.Exp2(now.Sub(from).Seconds()/fast))
		}
		r, from = l.known, reach
	}
	// Up to the configured rate, from twice as long after it.
	from = later(from, l.calm.Add(2*stale))
	if !now.After(from) {
		return min(l.ceiling, r)
	}
	return min(l.ceiling, r*math.Exp2(now.Sub(from).Seconds()/fast))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// refillLocked brings the tokens up to now at the learned rate, up to the
// bucket's size, which shrinks with the rate (burst x rate / ceiling, at
// least one): a node that learned a low rate does not spend a burst meant
// for the configured one.
func (l *limiter) refillLocked(now time.Time) {
	if l.last.IsZero() {
		l.last = now
	}
	if el := now.Sub(l.last); el > 0 {
		r := l.rateLocked(now)
		l.tokens = min(max(1, l.burst*r/l.ceiling), l.tokens+el.Seconds()*r)
		l.last = now
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// notify signals c without blocking (one pending signal covers all).
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// bucket is a fixed token bucket (a per-action limit): rate tokens per
// second, holding at most burst. A bucket with rate <= 0 never makes
// anyone wait.
type bucket struct {
	rate  float64
	burst float64

	mu     sync.Mutex // guards tokens and last
	tokens float64    // may go negative: tokens promised to waiters
	last   time.Time  // when tokens was last brought up to date
}

func newBucket(qps float64, burst int) *bucket {
	if burst < 1 {
		burst = 1
	}
	return &bucket{rate: qps, burst: float64(burst), tokens: float64(burst)}
}

// reserve takes one token at now and returns how long the caller must wait
// before using it. Taking the token at once (and going into debt) keeps
// waiters in FIFO order without a queue.
func (b *bucket) reserve(now time.Time) time.Duration {
	if b == nil || b.rate <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.last = now
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(b.burst, b.tokens+el.Seconds()*b.rate)
		b.last = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}

// Priority says whether a call may wait for others (see WithPriority).
type Priority int

const (
	// Normal calls (what a waiting pod needs, the agent's reads) are
	// granted before Optional ones, and retried after throttling.
	Normal Priority = iota
	// Optional calls only top up the idle pool or release surplus: they
	// wait behind every Normal call, and after a refusal for throttling
	// they are not retried in the client but returned at once
	// (ErrThrottled); the caller plans them again when the limiter lets
	// them go (Client.BackoffUntil).
	Optional
)

type priorityKey struct{}

// WithPriority returns a context whose calls have priority p.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

type callerRetriesKey struct{}

// WithCallerRetries returns a context whose calls the caller retries
// itself, whole, on a back-off of its own (the agent's full observation:
// 1 s doubling to a minute): the client then retries only throttling,
// which its limiter paces, and returns a service failure (ErrUnavailable)
// at once. Retrying each describe five times inside a retried observation
// multiplied what a fleet asked of an API that was down by five.
func WithCallerRetries(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerRetriesKey{}, true)
}

func callerRetries(ctx context.Context) bool {
	b, _ := ctx.Value(callerRetriesKey{}).(bool)
	return b
}

func priorityOf(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}
