// Command warmsteps splits the warm scenario's ADDs into their steps, from
// the log of `go run ./bench -run warm -debug` (docs/benchmarks.md, "A warm
// ADD, step by step"):
//
//	go run ./bench -run warm -debug -charts=false -out /tmp/w.json 2> /tmp/w.log
//	go run ./bench/warmsteps /tmp/w.log
//
// Each "warm ADD" line gives the ADD's start, its entry's creation, its
// status's update and its return; the agent's plan lines between it and
// the one before give the first pass that started after the entry was
// written and when it had planned, and the SetupPod line of the pod's
// container when the setup was done. ADDs of more than -slow (the pool ran
// dry: a new ENI served them) are left out, and counted.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"time"
)

// steps are the parts of one ADD, in order.
var steps = []string{
	"libcni's exec of the plugin to the entry written",
	"entry written to the pass that reads it",
	"the pass's start to its plan",
	"plan to the setup done",
	"setup done to the status written",
	"status written to the ADD's return",
	"the ADD",
}

var (
	addRe   = regexp.MustCompile(`msg="warm ADD" .*container=(\S+) add_started=(\S+) entry_created=(\S+) status_updated=(\S+) add_returned=(\S+)`)
	planRe  = regexp.MustCompile(`^time=(\S+) .*msg=plan .*pass_started=(\S+)`)
	setupRe = regexp.MustCompile(`^time=(\S+) .*msg="action done" kind=SetupPod target=(\S+)`)
)

// split reads the log and returns each kept ADD's steps and how many were
// left out as slower than slow.
func split(r io.Reader, slow time.Duration) (rows [][]time.Duration, left int, err error) {
	type plan struct{ start, at time.Time }
	var plans []plan
	setups := map[string]time.Time{} // container ID prefix -> setup done
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := planRe.FindStringSubmatch(line); m != nil {
			at, err1 := clockTime(m[1])
			start, err2 := clockTime(m[2])
			if err1 == nil && err2 == nil {
				plans = append(plans, plan{start, at})
			}
			continue
		}
		if m := setupRe.FindStringSubmatch(line); m != nil {
			if at, err := clockTime(m[1]); err == nil && len(m[2]) >= 12 {
				setups[m[2][:12]] = at
			}
			continue
		}
		m := addRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var t [4]time.Time
		for i := range t {
			if t[i], err = clockTime(m[2+i]); err != nil {
				return nil, 0, fmt.Errorf("%q: %w", line, err)
			}
		}
		start, entry, status, ret := t[0], t[1], t[2], t[3]
		setup, ok := setups[m[1]]
		i := slices.IndexFunc(plans, func(p plan) bool { return !p.start.Before(entry) })
		plansBefore := plans
		plans, setups = nil, map[string]time.Time{}
		if ret.Sub(start) > slow {
			left++
			continue
		}
		if !ok || i < 0 {
			continue // not in the log (no -debug): nothing to split
		}
		p := plansBefore[i]
		rows = append(rows, []time.Duration{entry.Sub(start), p.start.Sub(entry), p.at.Sub(p.start),
			setup.Sub(p.at), status.Sub(setup), ret.Sub(status), ret.Sub(start)})
	}
	return rows, left, sc.Err()
}

// clockTime parses the bench's debug time of day (15:04:05.000000).
func clockTime(s string) (time.Time, error) { return time.Parse("15:04:05.000000", s) }

func main() {
	slow := flag.Duration("slow", 60*time.Millisecond, "leave out ADDs slower than this (a new ENI served them)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: warmsteps [-slow D] LOG (the stderr of go run ./bench -run warm -debug)")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "warmsteps:", err)
		os.Exit(1)
	}
	defer f.Close()
	rows, left, err := split(f, *slow)
	if err != nil {
		fmt.Fprintln(os.Stderr, "warmsteps:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "warmsteps: no ADD with its steps in the log (was the bench run with -run warm -debug?)")
		os.Exit(1)
	}
	fmt.Printf("%d ADDs (%d slower than %s left out)\n", len(rows), left, *slow)
	for j, name := range steps {
		col := make([]time.Duration, len(rows))
		for i, r := range rows {
			col[i] = r[j]
		}
		slices.Sort(col)
		fmt.Printf("%-50s p50 %8.2f ms  p90 %8.2f ms\n", name, ms(col[len(col)/2]), ms(col[len(col)*9/10]))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
