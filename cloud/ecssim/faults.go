package ecssim

import (
	"cmp"
	"math"
	"net/http"
	"time"
)

// bucket is the account-wide token bucket (AccountRateLimit).
type bucket struct {
	qps    float64
	burst  float64
	tokens float64
	last   time.Time
}

func (b *bucket) set(r RateLimit, now time.Time) {
	b.qps = r.QPS
	b.burst = float64(r.Burst)
	if b.burst <= 0 {
		b.burst = math.Max(1, r.QPS)
	}
	b.tokens, b.last = b.burst, now
}

// take reports whether a call may proceed now.
func (b *bucket) take(now time.Time) bool {
	if b.qps <= 0 {
		return true
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = math.Min(b.burst, b.tokens+el*b.qps)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// InjectFault scripts an error (see Fault).
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Action == MetadataAction && f.Rate > 0 {
		s.run.MetadataFaults.Rate = f.Rate
		return
	}
	if f.Rate > 0 {
		if f.Action == "" {
			s.run.Faults.Rate = f.Rate
			return
		}
		pa := make(map[string]float64, len(s.run.Faults.PerAction)+1)
		for k, v := range s.run.Faults.PerAction {
			pa[k] = v
		}
		pa[f.Action] = f.Rate
		s.run.Faults.PerAction = pa
		return
	}
	if f.Count <= 0 {
		f.Count = 1
	}
	s.oneShot = append(s.oneShot, f)
}

// Settings are the behaviours that can be changed at run time.
type Settings struct {
	Faults           Faults
	Latency          Latency
	AccountRateLimit RateLimit
	StaleReads       time.Duration
	// Conflicts: a mutation of an ENI or instance that another mutation
	// holds (from admission to answer) gets OperationConflict.
	Conflicts bool
	// MetadataFaults are random errors of the metadata service.
	MetadataFaults MetadataFaults
}

// SetSettings replaces the run-time behaviours (random faults, latency,
// account rate limit, stale-read window) and clears scripted faults.
func (s *Server) SetSettings(st Settings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.run = st
	s.oneShot = nil
	s.bucket.set(st.AccountRateLimit, s.now())
}

// CurrentSettings returns the run-time behaviours in force.
func (s *Server) CurrentSettings() Settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run
}

// admit decides, with mu held, whether a call proceeds: it applies the
// account rate limit, then scripted faults, then random faults. It also
// returns the latency to add.
func (s *Server) admitLocked(action string) (time.Duration, *apiError) {
	d := s.latencyLocked(action)
	if !s.bucket.take(s.now()) {
		return d, apiErr("Throttling.User", "%s", defaultMessage("Throttling.User"))
	}
	if f, ok := s.takeOneShotLocked(func(f Fault) bool { return f.Action == "" || f.Action == action }); ok {
		e := apiErr(f.Code, "%s", f.Message)
		if e.Message == "" {
			e.Message = defaultMessage(f.Code)
			if e.Message == "" {
				e.Message = "Injected fault."
			}
		}
		if f.Status != 0 {
			e.Status = f.Status
		}
		return d, e
	}
	rate, ok := s.run.Faults.PerAction[action]
	if !ok {
		rate = s.run.Faults.Rate
	}
	if rate > 0 && s.rng.Float64() < rate {
		codes := s.run.Faults.Codes
		if len(codes) == 0 {
			codes = []string{"Throttling", "InternalError", "ServiceUnavailable"}
		}
		c := codes[s.rng.IntN(len(codes))]
		msg := defaultMessage(c)
		if msg == "" {
			msg = "Injected fault."
		}
		return d, apiErr(c, "%s", msg)
	}
	return d, nil
}

func (s *Server) latencyLocked(action string) time.Duration {
	l := LatencyDist{Fixed: s.run.Latency.Fixed, Uniform: s.run.Latency.Uniform, Exponential: s.run.Latency.Exponential}
	if pa, ok := s.run.Latency.PerAction[action]; ok {
		l = pa
	}
	d := l.Fixed
	if l.Uniform > 0 {
		d += time.Duration(s.rng.Int64N(int64(l.Uniform)))
	}
	if l.Exponential > 0 {
		d += time.Duration(s.rng.ExpFloat64() * float64(l.Exponential))
	}
	return d
}

// MetadataAction is the Fault.Action of the metadata service: a one-shot
// Fault with it fails the next Count metadata requests with Fault.Status
// (default 503; the body is Fault.Message), a Rate sets
// MetadataFaults.Rate. Its calls are counted under this name.
const MetadataAction = "Metadata"

// metadataFaultLocked returns the HTTP status a metadata request fails
// with (0: none), drawing scripted faults first, then MetadataFaults.
func (s *Server) metadataFaultLocked() int {
	if f, ok := s.takeOneShotLocked(func(f Fault) bool { return f.Action == MetadataAction }); ok {
		return cmp.Or(f.Status, http.StatusServiceUnavailable)
	}
	mf := s.run.MetadataFaults
	if mf.Rate > 0 && s.rng.Float64() < mf.Rate {
		st := []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests}
		if len(mf.Statuses) > 0 {
			st = mf.Statuses
		}
		return st[s.rng.IntN(len(st))]
	}
	return 0
}

// takeOneShotLocked draws the first scripted fault that match accepts,
// counting it down (and dropping it once spent).
func (s *Server) takeOneShotLocked(match func(Fault) bool) (Fault, bool) {
	for i, f := range s.oneShot {
		if !match(f) {
			continue
		}
		f.Count--
		if f.Count <= 0 {
			s.oneShot = append(s.oneShot[:i:i], s.oneShot[i+1:]...)
		} else {
			s.oneShot[i] = f
		}
		return f, true
	}
	return Fault{}, false
}
