// Command bench is enid's benchmark harness: it runs the scenarios of
// docs/benchmarks.md (warm ADD against the netlink floor, a cold burst
// against the API lower bound, churn under three pool settings, planner
// cost, agent memory, a fleet sharing one account's rate limit, the fast
// path side by side with the reference plugins ptp and bridge, /28
// prefix mode beside secondary addresses, and pods of two security-group
// sets on one node) on the ECS simulator, prints one Markdown table, writes
// the figures as JSON and draws the samples behind them as SVG charts
// beside it (chart.go).
//
// It sits outside desired -> observed -> plan -> execute: it drives the
// real agent (in-process, or `enid run` as a subprocess) and the real CNI
// plugin, and only measures. It fails only when a scenario crashes or
// breaks an invariant (an IP bound twice, a pod never Ready, the
// simulator's Check failing), never on timing: timing is reported against
// the targets, met or missed. Its own calls to package time are
// measurements on the wall clock; the agents it runs get clock.Real like
// `enid run` (bench/agent.go).
//
//	go run ./bench                 # the full run (about 7 minutes on 2 cores; root for warm ADD and reference)
//	go run ./bench -quick          # the CI smoke run (under 2 minutes)
//	go run ./bench -run burst,fleet -fleet-nodes 200
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

// sizes are the scenario sizes the flags pick.
type sizes struct {
	warmPods  int
	burstPods int
	churnTime time.Duration
	memPods   int
	// memPprof, when set, is where the memory scenario's agents serve
	// their metrics and Go profiles (enid run --pprof), to see where the
	// memory goes while they run.
	memPprof   string
	fleetNodes int
	fleetPods  int
	// fleetJoinAll starts every fleet node at once instead of staggered.
	fleetJoinAll bool
	// fleetRuns is how many fresh fleets the rollout runs on.
	fleetRuns int
	// refRounds and refPods size the side-by-side run with the reference
	// plugins: measured rounds, and background pods per plugin.
	refRounds, refPods int
	// scaleProfile, when set, is a directory where the node-scale scenario
	// writes a CPU profile of its agent over the probe ADDs at each size.
	scaleProfile string
}

func main() {
	var (
		quick   = flag.Bool("quick", false, "small sizes, for CI (under 2 minutes)")
		out     = flag.String("out", "bench-results.json", "write the results as JSON here")
		charts  = flag.Bool("charts", true, "draw the results' samples as SVG charts beside the JSON (-out x.json: x.charts/)")
		run     = flag.String("run", "all", "comma-separated scenarios: warm,burst,churn,planner,memory,fleet,reference,prefix,sets,nodescale (or all)")
		workDir = flag.String("work-dir", "", "scratch directory (default: a temporary one under /dev/shm or /tmp, removed at the end)")
		verbose = flag.Bool("v", false, "log the agents' warnings to stderr")
		debug   = flag.Bool("debug", false, "log the agents' debug lines (every plan) to stderr")
		cpuProf = flag.String("cpuprofile", "", "write a CPU profile of the harness process (in-process agents included) here")
		profile = flag.String("sim-profile", "", "simulator timing for the burst, churn and fleet scenarios: \"\" (the harness's latency model) or realistic (ecssim's realistic profile: seconds-long attaches, stale describes, conflicts)")
		sz      sizes
	)
	flag.IntVar(&sz.warmPods, "warm-pods", 0, "sequential ADDs in the warm scenario (default 200, quick 30)")
	flag.IntVar(&sz.burstPods, "burst-pods", 0, "pods in the cold burst (default 64, quick 64)")
	flag.DurationVar(&sz.churnTime, "churn-time", 0, "length of the churn trace (default 60s, quick 12s)")
	flag.IntVar(&sz.memPods, "memory-pods", 0, "pods in the memory scenario (default 250, quick 50)")
	flag.StringVar(&sz.memPprof, "memory-pprof", "", "serve the memory scenario's agents' profiles at http://ADDR/debug/pprof/ (one agent at a time), e.g. 127.0.0.1:6060")
	flag.IntVar(&sz.fleetNodes, "fleet-nodes", 0, "simulated nodes in the fleet (default 1000, quick 50)")
	flag.IntVar(&sz.fleetPods, "fleet-pods", 0, "pods per fleet node (default 5)")
	flag.IntVar(&sz.refRounds, "reference-rounds", 0, "rounds of the side-by-side run with the reference plugins (default 50)")
	flag.IntVar(&sz.refPods, "reference-pods", 0, "background pods per plugin in that run (default 30)")
	flag.IntVar(&sz.fleetRuns, "fleet-runs", 0, "fresh fleets the rollout runs on (default 5, quick 1)")
	flag.StringVar(&sz.scaleProfile, "nodescale-cpuprofile", "", "write a CPU profile of the node-scale agent (enid run --pprof) over the probe ADDs at each size into this directory (<pods>.prof; the probes then run for the profile's 3 s)")
	flag.BoolVar(&sz.fleetJoinAll, "fleet-join-all", false, "start every fleet node at once (a join storm) instead of at the rate the account limit affords")
	flag.Parse()
	def := func(p *int, full, q int) {
		if *p == 0 {
			*p = full
			if *quick {
				*p = q
			}
		}
	}
	def(&sz.warmPods, 200, 30)
	def(&sz.burstPods, 64, 64)
	def(&sz.memPods, 250, 50)
	def(&sz.fleetNodes, 1000, 50)
	def(&sz.fleetPods, 5, 5)
	def(&sz.fleetRuns, 5, 1)
	def(&sz.refRounds, 50, 10)
	def(&sz.refPods, 30, 10)
	if sz.churnTime == 0 {
		sz.churnTime = 60 * time.Second
		if *quick {
			sz.churnTime = 12 * time.Second
		}
	}
	level := slog.LevelError
	if *verbose {
		level = slog.LevelWarn
	}
	if *debug {
		level = slog.LevelDebug
	}
	// Debug lines carry microseconds: a warm ADD's steps are a few
	// hundred of them apart.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindTime {
			return slog.String(a.Key, a.Value.Time().UTC().Format("15:04:05.000000"))
		}
		return a
	}}))
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	}

	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
		defer f.Close()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	model, err := modelFor(*profile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	code, err := runAll(ctx, env{log: log, progress: progress, quick: *quick, sizes: sz, root: os.Geteuid() == 0,
		workDir: *workDir, model: model}, strings.Split(*run, ","), *out, *charts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
	}
	if *cpuProf != "" {
		pprof.StopCPUProfile()
	}
	os.Exit(code)
}

// env is what every scenario gets.
type env struct {
	// model is the simulator's latency model (-sim-profile).
	model    latencyModel
	log      *slog.Logger
	progress func(format string, args ...any)
	quick    bool
	sizes    sizes
	root     bool
	// workDir is the scratch directory of the whole run; each scenario
	// makes its own subdirectory.
	workDir string
	// srcDir is enid's module root (for go build and go test).
	srcDir string
}

// scenario is one row (or a few rows) of the table.
type scenario struct {
	name string
	run  func(ctx context.Context, e env) []Result
}

func scenarios() []scenario {
	return []scenario{
		{"warm", runWarm},
		{"burst", runBurst},
		{"churn", runChurn},
		{"planner", runPlanner},
		{"memory", runMemory},
		{"fleet", runFleet},
		{"reference", runReference},
		{"prefix", runPrefix},
		{"sets", runSGSets},
		{"nodescale", runNodeScale},
	}
}

// runAll runs the picked scenarios, prints the table and writes the JSON
// to out (and, with charts, the charts beside it; none without out).
func runAll(ctx context.Context, e env, picked []string, out string, charts bool) (int, error) {
	want := map[string]bool{}
	for _, p := range picked {
		want[strings.TrimSpace(p)] = true
	}
	known := map[string]bool{"all": true}
	for _, s := range scenarios() {
		known[s.name] = true
	}
	for p := range want {
		if !known[p] {
			return 2, fmt.Errorf("-run: unknown scenario %q (use warm, burst, churn, planner, memory, fleet, reference, prefix, sets, nodescale or all)", p)
		}
	}
	src, err := moduleRoot()
	if err != nil {
		return 1, err
	}
	e.srcDir = src
	if e.workDir == "" {
		base := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm" // tmpfs: a thousand agents' fsyncs cost nothing
		}
		d, err := os.MkdirTemp(base, "enid-bench-")
		if err != nil {
			return 1, err
		}
		defer os.RemoveAll(d)
		e.workDir = d
	}
	m := machine()
	rep := Report{Command: "go run ./bench " + strings.Join(os.Args[1:], " "), Machine: m, Quick: e.quick,
		Started: time.Now().UTC().Format(time.RFC3339)}
	for _, s := range scenarios() {
		if !want["all"] && !want[s.name] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		e.progress("%s ...", s.name)
		start := time.Now()
		rs := s.run(ctx, e)
		for i := range rs {
			if rs[i].Elapsed == 0 {
				rs[i].Elapsed = Seconds(time.Since(start))
			}
		}
		e.progress("%s done in %s", s.name, time.Since(start).Round(time.Millisecond))
		rep.Results = append(rep.Results, rs...)
	}
	fmt.Printf("Command: `%s`  \nMachine: %s\n\n", rep.Command, m)
	renderTable(os.Stdout, rep.Results)
	if out != "" {
		if err := writeJSON(out, rep); err != nil {
			return 1, fmt.Errorf("write %s: %w", out, err)
		}
		if charts {
			files, err := writeCharts(chartsDir(out), rep.Results)
			if len(files) > 0 {
				e.progress("charts: %d SVG files in %s", len(files), chartsDir(out))
			}
			if err != nil {
				return 1, fmt.Errorf("charts: %w", err)
			}
		}
	}
	if ctx.Err() != nil {
		return 1, ctx.Err()
	}
	for _, r := range rep.Results {
		if len(r.Broken) > 0 {
			return 1, fmt.Errorf("scenario %s broke an invariant", r.Scenario)
		}
	}
	return 0, nil
}

func machine() Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), Root: os.Geteuid() == 0}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// moduleRoot finds enid's source (go.mod) from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; {
		if b, err := os.ReadFile(d + "/go.mod"); err == nil && strings.Contains(string(b), "module github.com/enidnet/enid") {
			return d, nil
		}
		parent := d[:max(0, strings.LastIndex(d, "/"))]
		if parent == "" || parent == d {
			return "", fmt.Errorf("run the harness from enid's source tree (no go.mod of github.com/enidnet/enid above %s)", dir)
		}
		d = parent
	}
}
