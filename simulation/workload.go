package simulation

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// workload draws, from the seed, what happens to the fleet: nodes joining,
// pods coming and going, and (Config.Faults) the odd orderings and the
// faults. Every draw is made on the run's goroutine, in the order of the
// events, so the run stays a function of the seed.
type workload struct {
	w    *world
	rng  *rand.Rand
	base ecssim.Settings
}

// Fault rates per node per hour of the workload (Config.Faults).
const (
	killsPerHour = 2
	// attachKillsPerHour arms a kill at the node's next answered attach
	// (node.killOnAttach).
	attachKillsPerHour = 2
	configsPerHour     = 2
	gcsPerHour         = 2
	// Cloud-wide windows per hour: outages and throttling storms.
	outagesPerHour = 2
	stormsPerHour  = 2
)

// exp draws an exponential duration of the given mean.
func (wl *workload) exp(mean time.Duration) time.Duration {
	return time.Duration(wl.rng.ExpFloat64() * float64(mean))
}

// poisson schedules fn at the arrivals of a Poisson process of rate
// perHour over the workload.
func (wl *workload) poisson(perHour float64, fn func()) {
	if perHour <= 0 {
		return
	}
	mean := time.Duration(float64(time.Hour) / perHour)
	for t := wl.exp(mean); t < wl.w.cfg.Workload; t += wl.exp(mean) {
		wl.w.at(Start.Add(t), fn)
	}
}

// schedule draws the run's events.
func (wl *workload) schedule() {
	w := wl.w
	cfg := w.cfg
	w.after(configuredEvery, w.checkConfigured)
	// Nodes join over the first minute (all at once for one node).
	for _, n := range w.nodes {
		n := n
		at := time.Duration(0)
		if len(w.nodes) > 1 {
			at = time.Duration(wl.rng.Int64N(int64(time.Minute)))
		}
		// A quarter of the nodes (with faults) die at their first attach,
		// as e2e TestKillDuringAttach's does: a node grows its pool once
		// and seldom attaches again.
		armed := cfg.Faults && wl.rng.IntN(4) == 0
		w.at(Start.Add(at), func() {
			if armed {
				w.mu.Lock()
				n.killOnAttach = true
				w.mu.Unlock()
			}
			if err := n.join(); err != nil {
				w.violate("%s: join: %v", n.name, err)
				return
			}
			for range cfg.Pods {
				wl.startPod(n, false)
			}
		})
		wl.poisson(cfg.Churn*60, func() {
			if n.cur != nil {
				wl.startPod(n, wl.rng.IntN(10) == 0)
			}
		})
		if !cfg.Faults {
			continue
		}
		wl.poisson(killsPerHour, func() {
			if n.cur != nil {
				w.stats.Kills++
				if err := n.kill(); err != nil {
					w.violate("%v", err)
				}
			}
		})
		wl.poisson(attachKillsPerHour, func() {
			w.mu.Lock()
			n.killOnAttach = true
			w.mu.Unlock()
			w.log("%s: the agent dies at its next answered attach", n.name)
		})
		wl.poisson(configsPerHour, func() { wl.changeConfig(n) })
		wl.poisson(gcsPerHour, func() { wl.gc(n) })
		// A burst: ten pods at once.
		wl.poisson(1, func() {
			if n.cur != nil {
				for range 10 {
					wl.startPod(n, false)
				}
			}
		})
	}
}

// startPod starts a pod with a drawn lifetime; with odd (Config.Faults),
// one of the odd orderings happens to it.
func (wl *workload) startPod(n *node, statefulSet bool) {
	w := wl.w
	n.nextName++
	name := fmt.Sprintf("p%d", n.nextName)
	p := n.newPod(name)
	life := wl.exp(10 * time.Minute)
	if w.cfg.Faults {
		switch wl.rng.IntN(20) {
		case 0: // DEL before the ADD's status: the runtime gave up at once.
			life = time.Duration(wl.rng.Int64N(int64(50 * time.Millisecond)))
		case 1: // the runtime repeats the ADD (same sandbox).
			w.after(time.Duration(wl.rng.Int64N(int64(2*time.Second))), func() {
				if p.phase == podAdding {
					p.write()
				}
			})
		case 2: // the runtime repeats the DEL.
			w.after(life+time.Duration(wl.rng.Int64N(int64(time.Second))), func() {
				if p.phase == podDeleting || p.phase == podGone {
					p.del("DEL repeated")
				}
			})
		case 3: // the runtime never DELs: only a CNI GC clears the entry.
			w.after(life, func() { p.lost = true })
			return
		}
	}
	w.after(life, func() {
		p.finish()
		if statefulSet {
			// The StatefulSet's controller makes the pod again under its name.
			w.after(time.Second, func() {
				if n.cur != nil && !wl.over() {
					n.newPod(name)
				}
			})
		}
	})
}

// over reports whether the workload has ended (wrapUp ran).
func (wl *workload) over() bool { return !wl.w.clk.Now().Before(Start.Add(wl.w.cfg.Workload)) }

// gc is a CNI GC of the node: the runtime lists the attachments it knows;
// the entries of the others are removed (as cmd/enid-cni's GC does).
func (wl *workload) gc(n *node) {
	if n.cur == nil {
		return
	}
	for _, id := range n.podIDs() {
		p := n.pods[id]
		if p.lost && p.phase != podGone {
			p.ended = true
			p.del("CNI GC")
		}
	}
	wl.w.log("%s CNI GC", n.name)
}

// changeConfig lands a config change on the node: another pool, or a
// switch to or from prefix mode.
func (wl *workload) changeConfig(n *node) {
	if n.cur == nil {
		return
	}
	if wl.rng.IntN(3) == 0 {
		n.prefix = !n.prefix
	} else {
		n.poolIdx = wl.rng.IntN(len(poolKnobs))
	}
	wl.w.log("%s config: pool %v prefix %v", n.name, poolKnobs[n.poolIdx], n.prefix)
	if err := n.setConfig(wl.w.configYAML(poolKnobs[n.poolIdx], n.prefix)); err != nil {
		wl.w.violate("%s: write config: %v", n.name, err)
	}
}

// drawCloud draws the cloud's behaviour: stale reads and conflicts or not,
// and the windows of outage and throttling, and a few burnt tokens.
func (wl *workload) drawCloud() {
	w := wl.w
	s := wl.base
	if wl.rng.IntN(2) == 0 {
		s.StaleReads = time.Duration(wl.rng.Int64N(int64(2 * time.Second)))
	}
	s.Conflicts = wl.rng.IntN(2) == 0
	wl.base = s
	w.sim.SetSettings(s)
	w.log("cloud: stale reads %v, conflicts %v", s.StaleReads, s.Conflicts)
	wl.poisson(outagesPerHour, func() {
		d := time.Duration(30+wl.rng.IntN(300)) * time.Second
		o := wl.base
		o.Faults = ecssim.Faults{Rate: 1, Codes: []string{"ServiceUnavailable", "InternalError"}}
		wl.window("outage", d, o)
	})
	wl.poisson(stormsPerHour, func() {
		d := time.Duration(30+wl.rng.IntN(120)) * time.Second
		o := wl.base
		o.AccountRateLimit = ecssim.RateLimit{QPS: 2, Burst: 2}
		wl.window("throttling storm", d, o)
	})
	wl.poisson(4, func() {
		// A token burnt: the next assign fails with an error that burns
		// its ClientToken; a resend of the token answers IdempotentFailed.
		w.sim.InjectFault(ecssim.Fault{Action: "AssignPrivateIpAddresses", Code: "InvalidOperation.Conflict"})
		w.log("cloud: next assign fails (token burnt)")
	})
}

// window puts the cloud in settings s for d, then back.
func (wl *workload) window(what string, d time.Duration, s ecssim.Settings) {
	w := wl.w
	w.sim.SetSettings(s)
	w.log("cloud: %s for %v", what, d)
	until := w.clk.Now().Add(d)
	if until.After(w.faultUntil) {
		w.faultUntil = until
	}
	w.after(d, func() {
		if !w.clk.Now().Before(w.faultUntil) {
			w.sim.SetSettings(wl.base)
			w.log("cloud: %s over", what)
		}
	})
}

// wrapUp ends the workload: the cloud heals, every pod is deleted (the
// lost ones by a CNI GC).
func (wl *workload) wrapUp() {
	w := wl.w
	w.sim.SetSettings(wl.base)
	w.log("workload over: every pod deleted")
	for _, n := range w.nodes {
		if n.cur == nil {
			continue
		}
		for _, id := range n.podIDs() {
			p := n.pods[id]
			if p.lost {
				p.ended = true
				if p.phase != podGone {
					p.del("CNI GC")
				}
				continue
			}
			p.finish()
		}
	}
}
