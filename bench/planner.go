package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// benchLine matches a line of `go test -bench -benchmem` output, e.g.
// "BenchmarkMake/warm/pods=1000-2  200  631322 ns/op  877161 B/op  401 allocs/op".
var benchLine = regexp.MustCompile(`^BenchmarkMake/(\w+)/pods=(\d+)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op\s+(\d+) B/op\s+(\d+) allocs/op`)

// planBench is one parsed benchmark.
type planBench struct {
	kind          string // warm or burst
	pods          int
	ns, b, allocs float64
}

func parsePlannerBench(out []byte) []planBench {
	var bs []planBench
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		pods, _ := strconv.Atoi(m[2]) // the pattern admits digits only
		ns, _ := strconv.ParseFloat(m[3], 64)
		b, _ := strconv.ParseFloat(m[4], 64)
		al, _ := strconv.ParseFloat(m[5], 64)
		bs = append(bs, planBench{kind: m[1], pods: pods, ns: ns, b: b, allocs: al})
	}
	return bs
}

// runPlanner runs planner's BenchmarkMake suite (10 to 5000 pods, warm:
// a converged node, burst: every pod new) and reports time and
// allocations per plan.
func runPlanner(ctx context.Context, e env) []Result {
	benchtime := "1s"
	if e.quick {
		benchtime = "50x"
	}
	args := []string{"test", "-run", "^$", "-bench", "^BenchmarkMake$", "-benchmem", "-benchtime", benchtime, "./planner/"}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = e.srcDir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	setup := "go " + strings.Join(args, " ")
	if err != nil {
		r := Result{Scenario: "planner", Setup: setup}
		r.broken("go test failed: %v: %s", err, lastLines(out, 5))
		return []Result{r}
	}
	bs := parsePlannerBench(out)
	var rs []Result
	for _, kind := range []string{"warm", "burst"} {
		what := "a converged node (nothing to do)"
		if kind == "burst" {
			what = "every pod new in one pass"
		}
		r := Result{Scenario: "planner, " + kind, Setup: setup + ": " + what, Elapsed: Seconds(time.Since(start))}
		var at1000 *planBench
		for i, b := range bs {
			if b.kind != kind {
				continue
			}
			r.add(fmt.Sprintf("%d pods", b.pods), b.ns/1e6, "ms")
			r.add(fmt.Sprintf("allocs@%d", b.pods), b.allocs, "")
			if b.pods == 1000 {
				at1000 = &bs[i]
			}
		}
		if at1000 == nil {
			r.broken("no BenchmarkMake/%s/pods=1000 in the output: %s", kind, lastLines(out, 5))
		} else {
			r.judge("1000 pods < 1 ms", at1000.ns < 1e6)
		}
		rs = append(rs, r)
	}
	return rs
}

func lastLines(b []byte, n int) string {
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], " / ")
}
