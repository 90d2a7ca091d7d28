package cluster_test

import (
	"cmp"
	"context"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/kube/kubetest"
	"github.com/enidnet/enid/testbed/cluster"
	"github.com/enidnet/enid/testbed/upstreamimages"
)

var (
	upstream = flag.Bool("upstream", false,
		"run Kubernetes' own [sig-network] e2e tests (the upstream e2e.test, with ginkgo) on the two-node cluster; .ci/run does (docs/testing.md)")
	upstreamProcs = flag.Int("upstream-procs", 8, "ginkgo processes running the upstream tests at once")
	upstreamFocus = flag.String("upstream-focus", upstreamSelection,
		"the upstream tests to run (a ginkgo focus regexp); the skip list applies to it")
	upstreamDualStack = flag.Bool("upstream-dualstack", false,
		"run the upstream tests on a dual-stack cluster (IPv4 and IPv6 nodes, pods and Services), as the [Feature:IPv6DualStack] tests need (docs/testing.md)")
)

// upstreamSelection is what TestUpstreamNetwork runs: the networking
// granular checks (pod to pod and node to pod, HTTP and UDP, on one node
// and across nodes, and through Services) and the Service tests.
const upstreamSelection = `\[sig-network\] (Networking Granular Checks: |Services )`

// upstreamSkips are the selected tests that are not run, each with why it
// cannot pass here. docs/testing.md lists them (TestUpstreamSkipsDocumented).
var upstreamSkips = []struct{ pattern, reason string }{
	{`SCTP`, "SCTP: this machine's kernel has no SCTP (an SCTP socket fails with EPROTONOSUPPORT, and it has no modules to load)"},
	{`LoadBalancer`, "needs a cloud load balancer: enid is a CNI, the simulated cloud has no SLB"},
	{`\[Disruptive\]`, "restarts or partitions nodes through SSH or a provider, which this cluster has neither of"},
}

// upstreamParallelFlakes are upstream tests known to fail now and then in
// a parallel run for a reason of the suite's own, each with its upstream
// issue. A selected test that fails in the parallel run and matches one is
// run again alone; it counts as passed only if it passes then. Any other
// failure fails the run at once. docs/testing.md lists them
// (TestUpstreamSkipsDocumented).
var upstreamParallelFlakes = []struct{ pattern, issue, reason string }{
	{`Networking Granular Checks: Services should update nodePort`, "kubernetes/kubernetes#139786",
		"after deleting its NodePort Service it checks that nothing answers on the port, while a test in another process may be given the same port for its own Service, whose pods (named netserver-N too) answer"},
}

// parallelFlake returns the known flake a failed spec's name matches.
func parallelFlake(name string) (issue, reason string, ok bool) {
	for _, f := range upstreamParallelFlakes {
		if regexp.MustCompile(f.pattern).MatchString(name) {
			return f.issue, f.reason, true
		}
	}
	return "", "", false
}

// specFocus is a ginkgo --focus matching the spec named name in the JUnit
// report ("[It] <text> [labels]"): its text, quoted, at the end of what
// ginkgo matches (the suite's description, a space and the spec's text:
// ginkgo's internal/focus.go).
func specFocus(name string) string {
	text := strings.TrimPrefix(name, "[It] ")
	if i := strings.LastIndex(text, " ["); i >= 0 && strings.HasSuffix(text, "]") {
		text = text[:i]
	}
	return " " + regexp.QuoteMeta(text) + "$"
}

// upstreamSkipRegexp joins the skip list for ginkgo's --skip.
func upstreamSkipRegexp() string {
	var ps []string
	for _, s := range upstreamSkips {
		ps = append(ps, s.pattern)
	}
	return strings.Join(ps, "|")
}

// TestUpstreamNetwork runs Kubernetes' own network tests, the upstream
// e2e.test built from k8s.io/kubernetes at the kubelet's version, on the
// two-node cluster networked by enid, with their images built here and
// imported on both nodes. Every selected test must pass; it prints how
// many ran, passed and were skipped. It runs only with -upstream (a run
// takes minutes); .ci/run runs it.
func TestUpstreamNetwork(t *testing.T) {
	if !*upstream {
		t.Skip("the upstream network tests run with -upstream (docs/testing.md, \"Kubernetes' own network tests\")")
	}
	bin := kubetest.BinDir()
	for _, p := range []string{"e2e.test", "ginkgo"} {
		if bin == "" || !isExec(filepath.Join(bin, p)) {
			msg := p + " is not built (sh kube/kubetest/build.sh DIR network-e2e)"
			if kubetest.Required() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	images := upstreamImages(t)
	n, done := startTwoNodesWith(t, images, cluster.Options{DNS: true, DualStack: *upstreamDualStack})
	if !t.Run("apply", n.apply) {
		return
	}
	if !t.Run("dns", func(t *testing.T) { n.c.StartDNS() }) {
		return
	}
	t.Run("e2e.test", func(t *testing.T) { n.runUpstream(t, bin) })
	done()
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// runUpstream runs the selection with ginkgo in parallel from the first
// node (where the API server's address is reachable), then reads its
// JUnit report. Known parallel flakes that failed run again alone.
func (n *net2) runUpstream(t *testing.T, bin string) {
	// The report and ginkgo's output outlive a failed run (CI prints
	// where); a passed run removes them.
	report, err := os.MkdirTemp("", "enid-upstream-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("the upstream run's output and JUnit report are kept in %s", report)
			return
		}
		os.RemoveAll(report)
	}()
	start := time.Now()
	res, logPath, runErr := n.ginkgo(t, bin, filepath.Join(report, "parallel"), *upstreamFocus, *upstreamProcs)
	t.Logf("upstream [sig-network]: %d selected, %d ran, %d passed, %d failed, %d skipped, in %s",
		res.selected, res.ran, res.passed, len(res.failed), len(res.skipped), time.Since(start).Round(time.Second))
	for _, s := range res.skipped {
		t.Logf("skipped: %s", s)
	}
	// Where the suite's time goes (CI's cost, docs/testing.md).
	for _, s := range res.slowest(5) {
		t.Logf("slowest: %s %s", s.took.Round(time.Second), s.name)
	}
	var again []string
	for i, f := range res.failed {
		if _, _, ok := parallelFlake(res.failedSpecs[i]); ok {
			again = append(again, res.failedSpecs[i])
			t.Logf("failed in the parallel run, a known parallel flake, to run again alone: %s", f)
			continue
		}
		t.Errorf("failed: %s", f)
	}
	if runErr != nil && len(res.failed) == 0 {
		t.Errorf("ginkgo: %v\n%s", runErr, kubetest.Tail(logPath, 80))
	}
	if res.ran == 0 {
		t.Errorf("no upstream test ran\n%s", kubetest.Tail(logPath, 80))
	}
	if t.Failed() {
		t.Logf("ginkgo's output (tail):\n%s", kubetest.Tail(logPath, 200))
		return
	}
	for i, name := range again {
		issue, reason, _ := parallelFlake(name)
		r, log, err := n.ginkgo(t, bin, filepath.Join(report, fmt.Sprintf("alone-%d", i)), specFocus(name), 1)
		switch {
		case r.ran == 1 && r.passed == 1:
			t.Logf("passed alone: %s (it failed in the parallel run: %s, %s)", name, issue, reason)
		default:
			t.Errorf("failed again alone (%d ran, %d passed; ginkgo: %v): %s %v\n%s", r.ran, r.passed, err, name, r.failed, kubetest.Tail(log, 80))
		}
	}
}

// ginkgo runs e2e.test under ginkgo with procs processes on the specs
// focus matches (the skip list applies), writing its output and JUnit
// report into dir, and returns the report's specs of the selection, the
// output's path and ginkgo's own error.
func (n *net2) ginkgo(t *testing.T, bin, dir, focus string, procs int) (junitResult, string, error) {
	t.Helper()
	c := n.c
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--net=" + c.Nodes[0].NS, "--", filepath.Join(bin, "ginkgo"),
		fmt.Sprintf("--procs=%d", procs), "--no-color", "-v", "--timeout=40m",
		"--focus=" + focus, "--skip=" + upstreamSkipRegexp(),
		"--junit-report=" + filepath.Join(dir, "junit.xml"),
		filepath.Join(bin, "e2e.test"), "--",
		"--kubeconfig=" + c.Kubeconfig, "--provider=skeleton", "--num-nodes=2",
		"--kubectl-path=" + filepath.Join(bin, "kubectl"), "--report-dir=" + dir,
		"--minStartupPods=0", "--allowed-not-ready-nodes=0"}
	logPath := filepath.Join(dir, "ginkgo.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	runErr := cmd.Run()
	logf.Close()
	res, err := readJUnit(filepath.Join(dir, "junit.xml"), regexp.MustCompile(*upstreamFocus))
	if err != nil {
		t.Fatalf("the upstream tests' report: %v (ginkgo: %v)\n%s", err, runErr, kubetest.Tail(logPath, 80))
	}
	return res, logPath, runErr
}

// junitResult counts the report's selected specs.
type junitResult struct {
	selected, ran, passed int
	failed, skipped       []string
	// failedSpecs are the failed specs' names, in failed's order.
	failedSpecs []string
	// took is how long each spec that ran took.
	took []specTime
}

type specTime struct {
	name string
	took time.Duration
}

// slowest are the n specs that took longest, longest first.
func (r junitResult) slowest(n int) []specTime {
	s := slices.Clone(r.took)
	slices.SortFunc(s, func(a, b specTime) int { return cmp.Compare(b.took, a.took) })
	return s[:min(n, len(s))]
}

// readJUnit reads ginkgo's JUnit report: the specs whose name matches
// focus, how many ran and passed, which failed and which were skipped
// (with the skip list's or the test's own reason).
func readJUnit(path string, focus *regexp.Regexp) (junitResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return junitResult{}, err
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string  `xml:"name,attr"`
				Status  string  `xml:"status,attr"`
				Time    float64 `xml:"time,attr"`
				Skipped *struct {
					Message string `xml:"message,attr"`
				} `xml:"skipped"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
				Error *struct {
					Message string `xml:"message,attr"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return junitResult{}, fmt.Errorf("%s: %w", path, err)
	}
	var r junitResult
	for _, s := range doc.Suites {
		for _, tc := range s.Cases {
			if !focus.MatchString(tc.Name) {
				continue
			}
			r.selected++
			if tc.Skipped == nil {
				r.took = append(r.took, specTime{tc.Name, time.Duration(tc.Time * float64(time.Second))})
			}
			switch {
			case tc.Failure != nil || tc.Error != nil:
				r.ran++
				msg := ""
				if tc.Failure != nil {
					msg = tc.Failure.Message
				} else {
					msg = tc.Error.Message
				}
				r.failed = append(r.failed, tc.Name+": "+firstLine(msg))
				r.failedSpecs = append(r.failedSpecs, tc.Name)
			case tc.Skipped != nil:
				r.skipped = append(r.skipped, tc.Name+": "+skipReason(tc.Name, tc.Skipped.Message))
			default:
				r.ran++
				r.passed++
			}
		}
	}
	slices.Sort(r.skipped)
	return r, nil
}

// skipReason is the skip list's reason for a spec, or the test's own.
func skipReason(name, msg string) string {
	for _, s := range upstreamSkips {
		if regexp.MustCompile(s.pattern).MatchString(name) {
			return s.reason
		}
	}
	return firstLine(msg)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// TestUpstreamSkipsDocumented: docs/testing.md lists every pattern of the
// skip list with its reason, so the list an operator reads is the one
// that runs.
func TestUpstreamSkipsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "docs", "testing.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, s := range upstreamSkips {
		if !strings.Contains(doc, "`"+s.pattern+"`") || !strings.Contains(doc, s.reason) {
			t.Errorf("docs/testing.md does not list the skip %q with its reason %q", s.pattern, s.reason)
		}
	}
	for _, f := range upstreamParallelFlakes {
		if !strings.Contains(doc, "`"+f.pattern+"`") || !strings.Contains(doc, f.issue) || !strings.Contains(doc, f.reason) {
			t.Errorf("docs/testing.md does not list the parallel flake %q with its issue %s and reason %q", f.pattern, f.issue, f.reason)
		}
	}
}

// TestParallelFlakeRerunFocus: a failed spec that matches a known
// parallel flake is found, and the focus it runs again with matches its
// own text and no other spec's (ginkgo matches the text without the
// report's "[It] " and labels).
func TestParallelFlakeRerunFocus(t *testing.T) {
	name := "[It] [sig-network] Networking Granular Checks: Services should update nodePort: udp [Slow] [sig-network, Slow]"
	if _, _, ok := parallelFlake(name); !ok {
		t.Fatalf("%q is not found as a known parallel flake", name)
	}
	if _, _, ok := parallelFlake("[It] [sig-network] Networking Granular Checks: Services should function for node-Service: udp [sig-network]"); ok {
		t.Error("a spec that is not a known flake is found as one")
	}
	focus := regexp.MustCompile(specFocus(name))
	for text, want := range map[string]bool{
		"[sig-network] Networking Granular Checks: Services should update nodePort: udp [Slow]":      true,
		"[sig-network] Networking Granular Checks: Services should update nodePort: http [Slow]":     false,
		"[sig-network] Networking Granular Checks: Services should update nodePort: udp":             false,
		"[sig-network] Networking Granular Checks: Services should update nodePort: udp [Slow] more": false,
	} {
		if got := focus.MatchString("Kubernetes e2e suite " + text); got != want {
			t.Errorf("focus %s on %q = %v, want %v", focus, text, got, want)
		}
	}
}

// upstreamImages builds the images the upstream tests run (agnhost,
// busybox, pause, ... under the names e2e.test asks for).
func upstreamImages(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tarballs, err := upstreamimages.Build(ctx, t.TempDir(), kubetest.BinDir())
	if err != nil {
		t.Fatalf("the upstream tests' images: %v", err)
	}
	return tarballs
}

// TestReadJUnit: the report's selected specs are counted by outcome, a
// skip gets the skip list's reason, and the slowest are those that ran,
// longest first.
func TestReadJUnit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junit.xml")
	const report = `<testsuites><testsuite>
<testcase name="[It] [sig-network] Services fast" status="passed" time="2.5"></testcase>
<testcase name="[It] [sig-network] Services slow" status="passed" time="130.25"></testcase>
<testcase name="[It] [sig-network] Services broken" status="failed" time="40"><failure message="boom&#xA;detail"></failure></testcase>
<testcase name="[It] [sig-network] Services SCTP" status="skipped" time="900"><skipped message="skipped"></skipped></testcase>
<testcase name="[It] [sig-storage] unselected" status="passed" time="1000"></testcase>
</testsuite></testsuites>`
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := readJUnit(path, regexp.MustCompile(upstreamSelection))
	if err != nil {
		t.Fatal(err)
	}
	if r.selected != 4 || r.ran != 3 || r.passed != 2 || len(r.failed) != 1 || len(r.skipped) != 1 {
		t.Errorf("selected %d ran %d passed %d failed %v skipped %v, want 4, 3, 2, one, one", r.selected, r.ran, r.passed, r.failed, r.skipped)
	}
	if len(r.failed) == 1 && r.failed[0] != "[It] [sig-network] Services broken: boom" {
		t.Errorf("failed = %q", r.failed[0])
	}
	if len(r.skipped) == 1 && !strings.Contains(r.skipped[0], "no SCTP") {
		t.Errorf("skipped = %q, want the skip list's SCTP reason", r.skipped[0])
	}
	var got []string
	for _, s := range r.slowest(2) {
		got = append(got, fmt.Sprintf("%s %s", s.took, s.name))
	}
	want := []string{"2m10.25s [It] [sig-network] Services slow", "40s [It] [sig-network] Services broken"}
	if !slices.Equal(got, want) {
		t.Errorf("slowest(2) = %q, want %q", got, want)
	}
	if n := len(r.slowest(10)); n != 3 {
		t.Errorf("slowest(10) has %d specs, want the 3 that ran", n)
	}
}
