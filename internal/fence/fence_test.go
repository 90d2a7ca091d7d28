// Package fence holds the dependency check of the whole module: for every
// package, which enid packages and which third-party modules it may import,
// and why (DESIGN.md's package table, made executable). A package added to
// the module must be given a row here; an import outside its row fails.
// internal/ holds leaves only (TestInternalHoldsLeaves); the testbed, the
// simulated VPC, node and CNI runtime that the demo, the bench and the
// tests run enid in, is testbed/. Finer fences stay beside their packages: planner/fence_test.go (no I/O in
// the planner), cmd/enid-cni/fence_test.go (no SDK or netlink in the plugin)
// and kube/fence_test.go (client-go only in kube).
package fence

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/enidnet/enid/"

// rule is what one package may import besides the standard library: enid
// packages (module-relative) and third-party import path prefixes.
type rule struct {
	enid []string
	ext  []string
	why  string
}

var (
	sdk     = []string{"github.com/aliyun/alibaba-cloud-sdk-go/"}
	netlink = []string{"github.com/vishvananda/netlink", "github.com/vishvananda/netns", "golang.org/x/sys/unix"}
	// nftables is netfilter over netlink (the agent's image has no
	// iptables or nft binary to exec).
	nftables = append(slices.Clone(netlink), "github.com/google/nftables")
	cniLibs  = []string{"github.com/containernetworking/cni/", "github.com/containernetworking/plugins/pkg/ns"}
	k8s      = []string{"k8s.io/"}
)

var rules = map[string]rule{
	"observed": {enid: []string{"internal/podkey"}, why: "the observed-state types: the bottom floor, stdlib only (and the attachment key, a stdlib-only leaf)"},
	"desired": {enid: []string{"internal/clock", "internal/fileread", "internal/podkey"}, ext: []string{"sigs.k8s.io/yaml", "github.com/fsnotify/fsnotify", "golang.org/x/sys/unix"},
		why: "config and entries: files, YAML and a watcher; no cloud, no netlink"},
	"planner":             {enid: []string{"desired", "observed"}, why: "pure: desired + observed in, a plan out (planner/fence_test.go forbids I/O too)"},
	"sweep":               {enid: []string{"observed"}, why: "pure like the planner: an observation of the account in, the ENIs dead nodes left out"},
	"planner/plannertest": {enid: []string{"desired", "observed", "planner"}, why: "the planner's script harness: as pure as the planner"},
	"cloud": {enid: []string{"observed", "internal/clock", "internal/fileread"}, ext: append(slices.Clone(sdk), "sigs.k8s.io/yaml"),
		why: "the only door to the cloud API: the SDK and the observed types; its config types are its own (not desired's); YAML for the credentials file"},
	"cloud/ecssim": {why: "the simulator speaks HTTP the real SDK talks to: stdlib only, it shares no code with the client it tests"},
	"linux":        {enid: []string{"observed", "internal/netnsid", "internal/podkey"}, ext: nftables, why: "the datapath: netlink (routes, rules, nftables) and namespaces, reporting observed types"},
	"kube":         {enid: []string{"internal/clock"}, ext: k8s, why: "the only client-go user, with types of its own (and the agent's clock, a stdlib-only leaf)"},
	"reconcile": {enid: []string{"cloud", "desired", "observed", "planner", "linux", "reconcile/status", "internal/clock", "internal/fileread", "internal/netnsid", "internal/podkey"},
		ext: []string{"github.com/prometheus/client_golang/prometheus"}, why: "the loop joins the floors below it (never kube: cmd/enid wires it through interfaces)"},
	"reconcile/status": {enid: []string{"internal/fileread", "internal/podkey"}, why: "file formats the plugin reads too: stdlib only"},
	"cmd/enid-cni": {enid: []string{"desired", "reconcile/status", "internal/netnsid"}, ext: cniLibs,
		why: "the plugin runs once per CNI call: small, no SDK, no netlink, no loop"},
	"cniinstall": {enid: []string{"internal/fileread", "internal/podkey"},
		why: "puts the plugin and its list on the node: files only (bounded reads, the one atomic write)"},
	"cmd/enid": {enid: []string{"cniinstall", "cloud", "cloud/ecssim", "desired", "observed", "planner", "sweep", "linux", "kube", "reconcile", "reconcile/status",
		"testbed/cnirun", "testbed/simnode", "testbed/simvpc", "internal/clock", "internal/poll"},
		ext: []string{"github.com/spf13/cobra", "github.com/spf13/pflag", "github.com/prometheus/client_golang/prometheus/promhttp", "k8s.io/klog/v2"},
		why: "the CLI wires everything; never a test helper (TestBinariesLinkNoTestCode)"},
	"internal/clock":    {why: "the one clock (real and virtual) every component takes from its owner: a stdlib-only leaf"},
	"internal/fileread": {why: "bounded, non-blocking reads: a leaf"},
	"internal/netnsid":  {why: "namespace identity: a leaf"},
	"internal/poll":     {enid: []string{"internal/clock"}, why: "waiting on files by asking again (demo, bench), on the caller's clock: a leaf over a leaf"},
	"internal/podkey":   {why: "attachment identity (key, grammar, file names, atomic write): a stdlib-only leaf under observed"},
	"internal/roottest": {why: "test helper: skip or fail without root"},
	"testbed/cnirun":    {ext: []string{"github.com/containernetworking/cni/"}, why: "drives enid-cni through the real libcni (demo, bench, e2e)"},
	"testbed/simvpc":    {ext: nftables, why: "the simulated VPC's namespaces (and its anti-spoofing), linked by enid demo: no test package"},
	"testbed/simnode":   {enid: []string{"cloud/ecssim", "testbed/simvpc"}, why: "a simulated node: the simulator plus its namespaces"},
	"testbed/ctrtest": {enid: []string{"internal/roottest"}, ext: []string{"golang.org/x/sys/unix"},
		why: "test helper: a test's own containerd, and what it leaves behind (e2e, image, upstreamimages)"},
	"testbed/upstreamimages": {enid: []string{"internal/ociimage"}, ext: []string{"github.com/google/go-containerregistry/"},
		why: "the upstream e2e suite's images, built from local programs; never the cluster harness, which imports it"},
	"testbed/clusterdns": {enid: []string{"internal/ociimage"}, ext: []string{"github.com/google/go-containerregistry/"},
		why: "the cluster's DNS (CoreDNS image and manifests); never the cluster harness, which imports it"},
	"linux/linuxtest": {enid: []string{"testbed/simvpc"}, why: "test helpers over simvpc"},
	"kube/kubetest":   {ext: k8s, why: "test helper: a real kube-apiserver for tests"},
	"testbed/cluster": {enid: []string{"cloud/ecssim", "kube/kubetest", "testbed/simnode", "testbed/simvpc", "testbed/ctrtest", "testbed/clusterdns", "internal/ociimage"},
		ext: append(slices.Clone(k8s), "github.com/google/go-containerregistry/"), why: "a real cluster of one or more nodes on the simulated VPC (kube-proxy, cluster DNS) for the operator's-day and network tests (e2e/cluster)"},
	"testbed/podserver": {why: "the cluster tests' workload: a static HTTP server, stdlib only"},
	"internal/ociimage": {ext: []string{"github.com/google/go-containerregistry/"}, why: "one-layer OCI images and docker-archive tarballs (./image, the cluster's test images): a leaf"},
	"bench": {enid: []string{"cloud", "cloud/ecssim", "desired", "observed", "linux", "reconcile", "reconcile/status", "testbed/cnirun", "testbed/simnode", "internal/clock", "internal/poll"},
		ext: []string{"github.com/containernetworking/plugins/pkg/ns", "gonum.org/v1/plot"},
		why: "the benchmark harness wires a real agent as enid run does, and draws its samples (gonum/plot: here only, never in what runs on a node)"},
	"bench/warmsteps": {why: "splits the warm scenario's -debug log into an ADD's steps: stdlib only"},
	"simulation": {enid: []string{"cloud", "cloud/ecssim", "desired", "observed", "linux", "reconcile", "reconcile/status", "internal/clock"},
		ext: []string{"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"},
		why: "the deterministic simulation wires real agents as enid run does, on one virtual clock, against the simulator in-process"},
	"image": {enid: []string{"cniinstall", "internal/ociimage"}, ext: []string{"github.com/google/go-containerregistry/"},
		why: "builds the image with go-containerregistry (never linked into enid); the image's paths are cniinstall's"},
	"e2e":                 {why: "tests only"},
	"e2e/cluster":         {why: "tests only"},
	"examples/kubernetes": {why: "tests only"},
	"internal/fence":      {why: "this test"},
}

// goList runs the go command of the toolchain running the test.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestImports checks every package's own (non-test) imports against its
// row, and that every row names a package that exists.
func TestImports(t *testing.T) {
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		seen[pkg] = true
		r, ok := rules[pkg]
		if !ok {
			t.Errorf("package %s has no row in internal/fence's rules: add what it may import and why", pkg)
			continue
		}
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				if !slices.Contains(r.enid, rel) {
					t.Errorf("%s imports %s, which its row does not allow (%s)", pkg, rel, r.why)
				}
				continue
			}
			if !strings.Contains(strings.Split(imp, "/")[0], ".") {
				continue // the standard library
			}
			if !slices.ContainsFunc(r.ext, func(p string) bool { return imp == p || strings.HasPrefix(imp, strings.TrimSuffix(p, "/")+"/") }) {
				t.Errorf("%s imports %s, which its row does not allow (%s)", pkg, imp, r.why)
			}
		}
	}
	if len(seen) < 10 {
		t.Fatalf("go list found only %d packages: the check would prove nothing", len(seen))
	}
	for pkg := range rules {
		if !seen[pkg] {
			t.Errorf("internal/fence has a row for %s, which does not exist", pkg)
		}
	}
}

// TestInternalHoldsLeaves: internal/ holds only leaves, packages that
// import nothing of enid's but other leaves there, so no arrow runs from
// them back up (issue 22: the testbed lives in testbed/, above them).
func TestInternalHoldsLeaves(t *testing.T) {
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(goList(t, "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./internal/...")), "\n") {
		f := strings.Fields(line)
		pkg := strings.TrimPrefix(f[0], module)
		if pkg == "internal/fence" {
			continue // this test: it imports nothing of enid's either
		}
		n++
		for _, dep := range f[1:] {
			if rel, ok := strings.CutPrefix(dep, module); ok && !strings.HasPrefix(rel, "internal/") {
				t.Errorf("%s depends on %s: internal/ must hold leaves only (move it up, e.g. to testbed/)", pkg, rel)
			}
		}
	}
	if n < 4 {
		t.Fatalf("found %d packages under internal/: the check would prove nothing", n)
	}
}

// TestBinariesLinkNoTestCode keeps test code out of what runs on a node:
// the binaries link neither package testing nor a test-helper package.
func TestBinariesLinkNoTestCode(t *testing.T) {
	for _, bin := range []string{"./cmd/enid", "./cmd/enid-cni"} {
		deps := strings.Fields(goList(t, "-deps", bin))
		if len(deps) < 10 {
			t.Fatalf("go list -deps %s returned %d packages: the check would prove nothing", bin, len(deps))
		}
		for _, d := range deps {
			if d == "testing" || strings.HasPrefix(d, "testing/") ||
				(strings.HasPrefix(d, module) && strings.HasSuffix(d, "test")) {
				t.Errorf("%s links %s", bin, d)
			}
		}
	}
}
