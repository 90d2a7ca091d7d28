package reconcile

import "sync"

// lane runs jobs on at most n goroutines at once, starting an urgent job
// (planner.Action.Urgent: on a waiting pod's path) before any other that
// waits, each kind in arrival order. A job that waits holds no goroutine:
// with thousands of entries a goroutine per waiting action cost tens of
// megabytes of stacks (issue 28), and a burst of statuses for entries that
// cannot be served never delays a live pod's setup by more than the jobs
// already running.
type lane struct {
	mu   sync.Mutex // guards the fields below
	free int        // goroutines that may still start
	// urgent and other are the jobs waiting, oldest first.
	urgent, other []func()
}

func newLane(n int) *lane { return &lane{free: max(1, n)} }

// run runs job on one of the lane's goroutines: at once when one is free,
// else when one is done with the jobs before it.
func (l *lane) run(urgent bool, job func()) {
	l.mu.Lock()
	if l.free > 0 {
		l.free--
		l.mu.Unlock()
		go l.work(job)
		return
	}
	if urgent {
		l.urgent = append(l.urgent, job)
	} else {
		l.other = append(l.other, job)
	}
	l.mu.Unlock()
}

// work runs job, then the waiting jobs (urgent first) until none is left;
// then its goroutine ends and frees its place.
func (l *lane) work(job func()) {
	for job != nil {
		job()
		l.mu.Lock()
		job = nil
		for _, q := range []*[]func(){&l.urgent, &l.other} {
			if len(*q) > 0 {
				job = (*q)[0]
				(*q)[0] = nil
				*q = (*q)[1:]
				break
			}
		}
		if job == nil {
			l.free++
		}
		l.mu.Unlock()
	}
}
