package upstreamimages

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/kube/kubetest"
	"github.com/enidnet/enid/testbed/ctrtest"
)

// kubeBin returns build.sh's cache when it holds agnhost; without it the
// test skips, except where the Kubernetes binaries are required
// (kubetest.Required: CI), where it fails.
func kubeBin(t *testing.T) string {
	t.Helper()
	dir := kubetest.BinDir()
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "agnhost")); err == nil {
			return dir
		}
	}
	msg := "agnhost is not built: run sh kube/kubetest/build.sh DIR network-e2e"
	if kubetest.Required() {
		t.Fatal(msg + "; it is required here (CI=true or ENID_REQUIRE_KUBE=1)")
	}
	t.Skip("skipped: " + msg)
	return ""
}

// TestNamesAreTheSuites: every image Build writes is one the suite of
// KubernetesVersion asks for (e2e.test --list-images), so a pod of the
// suite finds it imported and never tries a registry.
func TestNamesAreTheSuites(t *testing.T) {
	bin := filepath.Join(kubeBin(t), "e2e.test")
	if _, err := os.Stat(bin); err != nil {
		msg := "e2e.test is not built: run sh kube/kubetest/build.sh DIR network-e2e"
		if kubetest.Required() {
			t.Fatal(msg)
		}
		t.Skip("skipped: " + msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--list-images")
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("e2e.test --list-images: %v", err)
	}
	listed := strings.Fields(string(out))
	for _, n := range Names() {
		if !slices.Contains(listed, n) {
			t.Errorf("the suite does not list %s; it lists %d images:\n%s", n, len(listed), out)
		}
	}
}

// checkDeterministic builds the images a second time and wants the same
// bytes, so a cluster that imports them again finds the images it has, and
// each tarball to name the image Names gives at its index, which is how the
// cluster harness pairs them. It is part of the test that runs the images
// rather than a test of its own: a build takes 10 s, but 100 s under the
// race detector (gzip of 200 MB), and CI runs the tests with it.
func checkDeterministic(ctx context.Context, t *testing.T, bin string, a []string) {
	t.Helper()
	b, err := Build(ctx, t.TempDir(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(Names()) || len(b) != len(a) {
		t.Fatalf("tarballs %q and %q, want one per name of %q", a, b, Names())
	}
	for i := range a {
		x, err := os.ReadFile(a[i])
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(b[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s: two builds differ (%d and %d bytes)", Names()[i], len(x), len(y))
		}
		if tags := repoTags(t, x); !slices.Equal(tags, []string{Names()[i]}) {
			t.Errorf("tarball %d (%s) names %q, want %s: Build's order is not Names'", i, a[i], tags, Names()[i])
		}
	}
}

// repoTags returns the names a docker-archive tarball's manifest.json
// gives its image, which `ctr images import` tags it with.
func repoTags(t *testing.T, tarball []byte) []string {
	t.Helper()
	r := tar.NewReader(bytes.NewReader(tarball))
	for {
		h, err := r.Next()
		if err != nil {
			t.Fatalf("no manifest.json in the tarball: %v", err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(r).Decode(&m); err != nil || len(m) != 1 {
			t.Fatalf("manifest.json: %v (%d images)", err, len(m))
		}
		return m[0].RepoTags
	}
}

// TestImagesRunTheSuitesCommands imports the built images into a
// containerd of the test's own and runs in them, with ctr, the commands
// the [sig-network] tests run in their pods (kubectl exec ... /bin/sh -x
// -c CMD, or a container's command), each with the output the suite
// checks for. Each case names where in the suite its command comes from.
// First it checks that the build is deterministic (checkDeterministic).
func TestImagesRunTheSuitesCommands(t *testing.T) {
	bin := kubeBin(t)
	c := ctrtest.Start(t, "enid-upstreamimages-test")
	// Two builds take about 4 minutes under the race detector.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	tarballs, err := Build(ctx, t.TempDir(), bin)
	if err != nil {
		t.Fatal(err)
	}
	checkDeterministic(ctx, t, bin, tarballs)
	for _, tb := range tarballs {
		if _, err := c.Run(ctx, "images", "import", tb); err != nil {
			t.Fatal(err)
		}
	}
	out, err := c.Run(ctx, "images", "ls", "-q")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range Names() {
		if !slices.Contains(strings.Fields(out), n) {
			t.Fatalf("after the import, ctr images ls -q says %q, want %s", out, n)
		}
	}

	// The suite's netexec endpoint pod (framework/network/utils.go
	// createNetShellPodSpec): HTTP on 8080, UDP on 8081, NODE_NAME from
	// the downward API.
	p := startPod(ctx, t, c, "netexec", []string{"--env", "NODE_NAME=node-a"}, Agnhost,
		"/agnhost", "netexec", "--http-port=8080", "--udp-port=8081")
	p.waitServing(ctx)
	host := strings.TrimSpace(p.mustExec(ctx, "hostname"))
	if host == "" {
		t.Fatal("hostname in the agnhost image printed nothing")
	}
	// A second server in the pod: the jig's TCP/UDP serve-hostname
	// backends (framework/service/jig.go, /agnhost serve-hostname
	// --http=false --tcp --udp).
	p.startContainer(ctx, "serve-hostname", Agnhost, "/agnhost", "serve-hostname", "--http=false", "--tcp", "--udp", "--port=9376")

	h := regexp.QuoteMeta(host)
	for _, tc := range []struct {
		from string // where the suite runs it
		cmd  string
		fail bool   // the suite wants a non-zero exit
		want string // a regexp the trimmed standard output must match
		// polled: the suite polls this command until it succeeds, and
		// its first tries may fail for reasons of the server's making.
		polled bool
	}{
		{"framework/network DialFromNode (udp)", `echo hostName | nc -w 1 -u 127.0.0.1 8081 | grep -v '^\s*$'`, false, "^" + h + "$", false},
		{"framework/network DialFromNode (udp, NODE_NAME)", `echo 'envvar NODE_NAME' | nc -w 1 -u 127.0.0.1 8081 | grep -v '^\s*$'`, false, "^node-a$", false},
		{"framework/network DialFromNode (http)", `curl -g -q -s --max-time 15 --connect-timeout 1 http://127.0.0.1:8080/hostName | grep -v '^\s*$'`, false, "^" + h + "$", false},
		{"framework/network DialFromNode (http, NODE_NAME)", `curl -g -q -s --max-time 15 --connect-timeout 1 'http://127.0.0.1:8080/envvar?var=NODE_NAME' | grep -v '^\s*$'`, false, "^node-a$", false},
		{"framework/network DialFromContainer (http)", `curl -g -q -s 'http://127.0.0.1:8080/dial?request=hostname&protocol=http&host=127.0.0.1&port=8080&tries=1'`, false, `^\{"responses":\["` + h + `"\]\}$`, false},
		{"framework/network DialFromContainer (udp)", `curl -g -q -s 'http://127.0.0.1:8080/dial?request=hostname&protocol=udp&host=127.0.0.1&port=8081&tries=1'`, false, `^\{"responses":\["` + h + `"\]\}$`, false},
		{"framework/network DialEchoFromTestContainer", `curl -g -q -s 'http://127.0.0.1:8080/dial?request=echo?msg=hello&protocol=http&host=127.0.0.1&port=8080&tries=1'`, false, `^\{"responses":\["hello"\]\}$`, false},
		{"framework/network GetHTTPCodeFromTestContainer", `curl -g -q -s -o /dev/null -w %{http_code} http://127.0.0.1:8080/hostName`, false, "^200$", false},
		{"framework/network GetSelfURL", `curl -i -q -s --connect-timeout 1 http://localhost:8080/healthz`, false, `^HTTP/1.1 200 OK`, false},
		{"framework/service testEndpointReachability (tcp)", `echo hostName | nc -v -t -w 2 127.0.0.1 8080`, false, `HTTP/1.1 400 Bad Request`, false},
		{"framework/service testEndpointReachability (udp)", `echo hostName | nc -v -u -w 2 127.0.0.1 8081`, false, "^" + h + "$", false},
		// serve-hostname --tcp writes its name and closes at once: when
		// nc's "hostName" arrives after the close, the server's reset can
		// discard the name before nc reads it.
		{"framework/service testEndpointReachability (serve-hostname tcp)", `echo hostName | nc -v -t -w 2 127.0.0.1 9376`, false, "^" + h + "$", true},
		// nc -v -u first probes the port with a few "X" datagrams, and
		// serve-hostname answers each: the name comes more than once.
		{"framework/service testEndpointReachability (serve-hostname udp)", `echo hostName | nc -v -u -w 2 127.0.0.1 9376`, false, "^(" + h + ")+$", false},
		{"network/service affinityCheckFromPod", `for i in $(seq 0 2); do echo; curl -q -s --connect-timeout 2 --max-time 60 http://127.0.0.1:8080/hostname ; done`, false, "^" + h + "\n\n?" + h + "\n\n?" + h + "$", false},
		{"network/service verifyServeHostnameServiceUp", `for i in $(seq 1 3); do wget -q -O - -T 1 http://127.0.0.1:8080/hostname 2>&1 || true; echo; done`, false, "^" + h + "\n" + h + "\n" + h + "$", false},
		{"network/service verifyServeHostnameServiceDown", `curl -g -s --connect-timeout 2 http://127.0.0.1:1 && echo service-down-failed`, true, "^$", false},
		{"network/service (a service that must not answer)", `curl -q -s --connect-timeout 2 http://127.0.0.1:1/; test "$?" -ne "0"`, false, "^$", false},
		{"network/service checkReachabilityFromPod", `wget -T 5 -qO- "http://127.0.0.1:8080/hostname"`, false, "^" + h + "$", false},
		{"network/service (a node port no one listens on)", `! ss -ant46 'sport = :8089' | tail -n +2 | grep LISTEN`, false, "^$", false},
		{"network/service (a node port someone listens on)", `! ss -ant46 'sport = :8080' | tail -n +2 | grep LISTEN`, true, "LISTEN", false},
		{"network/service (agnhost connect, open)", `/agnhost connect --timeout=3s 127.0.0.1:8080`, false, "^$", false},
		{"network/service (agnhost connect, closed)", `/agnhost connect --timeout=3s 127.0.0.1:1`, true, "", false},
		{"network/service (source IP)", `curl -g -s --interface 127.0.0.1 --connect-timeout 3 http://127.0.0.1:8080/clientip`, false, `^127\.0\.0\.1:[0-9]+$`, false},
		{"network/service (health check node port)", `curl -s -o /dev/null -w "%{http_code}" --max-time 5 http://127.0.0.1:8080/healthz`, false, "^200$", false},
		{"network/kube_proxy (proxy mode, route_localnet)", `curl --silent 127.0.0.1:8080/hostname; echo; cat /proc/sys/net/ipv4/conf/all/route_localnet`, false, "^" + h + "\n[01]$", false},
		{"network/service (a terminating pod's command)", `/bin/sleep 1`, false, "^$", false},
		{"network/service (a failing container's command)", `/bin/false`, true, "^$", false},
		{"network/service (evicted pod)", `dd if=/dev/urandom of=/tmp/file bs=1M count=1 2>/dev/null && ls -l /tmp/file`, false, "1048576", false},
	} {
		out, err := p.exec(ctx, tc.cmd)
		for try := 1; tc.polled && try < 10 && (err != nil || !regexp.MustCompile(tc.want).MatchString(strings.TrimSpace(out))); try++ {
			time.Sleep(time.Second)
			out, err = p.exec(ctx, tc.cmd)
		}
		var ee *exec.ExitError
		switch {
		case err != nil && !errors.As(err, &ee):
			t.Errorf("%s: %s: %v", tc.from, tc.cmd, err)
			continue
		case tc.fail && err == nil:
			t.Errorf("%s: %s: exit 0, want a failure (output %q)", tc.from, tc.cmd, out)
		case !tc.fail && err != nil:
			t.Errorf("%s: %s: %v, want exit 0 (output %q)", tc.from, tc.cmd, err, out)
		}
		if !regexp.MustCompile(tc.want).MatchString(strings.TrimSpace(out)) {
			t.Errorf("%s: %s printed %q, want it to match %q", tc.from, tc.cmd, out, tc.want)
		}
	}

	// BusyBox in the pod's network (the conntrack tests' init and client
	// containers: /bin/sh -c with echo, sleep and nc).
	for _, tc := range []struct {
		from string
		args []string
		want string
	}{
		{"network/conntrack (init container)", []string{"/bin/sh", "-c", "echo Pausing start. && sleep 1"}, "^Pausing start\\.$"},
		{"network/conntrack (client: nc to a server)", []string{"sh", "-c", "echo hostName | nc -w 2 127.0.0.1 9376"}, "^" + h + "$"},
	} {
		out, err := p.run(ctx, nil, BusyBox, tc.args...)
		if err != nil {
			t.Errorf("%s: %q in busybox: %v", tc.from, tc.args, err)
			continue
		}
		if !regexp.MustCompile(tc.want).MatchString(strings.TrimSpace(out)) {
			t.Errorf("%s: %q in busybox printed %q, want it to match %q", tc.from, tc.args, out, tc.want)
		}
	}

	// nginx as the Endpoints and EndpointSlice tests' pods run it: the
	// image's own command, serving on port 80.
	p.startContainer(ctx, "nginx", Nginx)
	var page string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		page, err = p.exec(ctx, `curl -g -q -s -i --connect-timeout 1 http://127.0.0.1:80/`)
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !strings.HasPrefix(page, "HTTP/1.1 200 OK") || !strings.Contains(page, "nginx serves this page") {
		t.Errorf("nginx on port 80: %v\n%s", err, page)
	}

	// DNS as the DNS tests use it: CoreDNS from agnhost's image serving a
	// Corefile like generateCoreDNSConfigmap's (network/dns_common.go),
	// and the musl (agnhost) and glibc probers running createProbeCommand's
	// dig and getent checks with a resolv.conf that searches its zone.
	dns := t.TempDir()
	corefile := ". {\n\thosts {\n\t\t10.9.8.7 abc.acme.local\n\t}\n\tlog\n}\n"
	resolv := "nameserver 127.0.0.1\nsearch acme.local\noptions ndots:5\n"
	if err := os.WriteFile(filepath.Join(dns, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dns, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		t.Fatal(err)
	}
	p.start(ctx, "coredns", []string{"--with-ns", "network:" + p.netns,
		"--mount", "type=bind,src=" + dns + ",dst=/etc/coredns,options=rbind:ro"},
		Agnhost, "/coredns", "-conf", "/etc/coredns/Corefile")
	probe := `check="$(dig +notcp +noall +answer +search abc A)" && test -n "$check" && echo "OK udp $check";` +
		`check="$(dig +tcp +noall +answer +search abc A)" && test -n "$check" && echo "OK tcp $check";` +
		`test -n "$(getent hosts abc)" && echo "OK hosts $(getent hosts abc)"`
	want := regexp.MustCompile(`^OK udp abc\.acme\.local\.\s+\d+\s+IN\s+A\s+10\.9\.8\.7\n` +
		`OK tcp abc\.acme\.local\.\s+\d+\s+IN\s+A\s+10\.9\.8\.7\n` +
		`OK hosts 10\.9\.8\.7\s+abc\.acme\.local$`)
	mountResolv := []string{"--mount", "type=bind,src=" + filepath.Join(dns, "resolv.conf") + ",dst=/etc/resolv.conf,options=rbind:ro"}
	for _, image := range []string{Agnhost, GlibcDNSTesting} {
		var out string
		// CoreDNS may not serve yet: the suite's probe loops too.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			out, err = p.run(ctx, mountResolv, image, "sh", "-c", probe)
			if want.MatchString(strings.TrimSpace(out)) || time.Now().After(deadline) {
				break
			}
		}
		if !want.MatchString(strings.TrimSpace(out)) {
			t.Errorf("network/dns_common createProbeCommand in %s: %v\n%s\nwant it to match %s", image, err, out, want)
		}
	}

	// The conntrack test's boom server (network/conntrack.go "should drop
	// INVALID conntrack entries"): it listens on 9000 and logs the
	// connection a client opens (the test's client is busybox's nc).
	boomLog := p.start(ctx, "boom-server", []string{"--with-ns", "network:" + p.netns, "--env", "POD_IP=127.0.0.1", "--env", "POD_IPS=127.0.0.1"},
		RegressionIssue74839)
	var boom []byte
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		// The client's command, as conntrack.go's startup-script runs it.
		if _, err := p.run(ctx, nil, BusyBox, "sh", "-c", "echo hi | nc -w 1 127.0.0.1 9000"); err != nil {
			t.Logf("nc to the boom server: %v", err)
		}
		boom, _ = os.ReadFile(boomLog) // not there yet is the same as empty
		if bytes.Contains(boom, []byte("connection established")) || time.Now().After(deadline) {
			break
		}
	}
	if !bytes.Contains(boom, []byte("listen on 0.0.0.0:9000")) || !bytes.Contains(boom, []byte("connection established")) {
		t.Errorf("regression-issue-74839 did not log a connection:\n%s", boom)
	}
	for _, line := range strings.Split(string(boom), "\n") {
		if strings.Contains(line, "connection established") || strings.Contains(line, "boom packet") || strings.Contains(line, "ERROR") {
			t.Logf("the boom server logged: %s", line)
		}
	}

	// kube_proxy.go's host exec pod (distroless-iptables, privileged):
	// its command, sleep 600, runs; then the checks it execs in it. Here
	// in the pod's network namespace, not the host's.
	p.start(ctx, "e2e-net-exec", []string{"--with-ns", "network:" + p.netns, "--privileged"}, DistrolessIptables, "sleep", "600")
	for _, tc := range []struct{ cmd, want string }{
		{"test -f /proc/net/nf_conntrack || which conntrack", "conntrack|^$"},
		{"conntrack -L 2>&1 | tail -n 1", `flow entries have been shown`},
		{"cat /proc/net/nf_conntrack | grep -c . || true", `^[0-9]+$`},
		{"iptables -t nat -L -n | head -n 1", `^Chain PREROUTING`},
		{"iptables-legacy -t filter -L -n | head -n 1", `^Chain INPUT`},
		{"iptables-save -t filter | grep -c '^:'", `^[1-9][0-9]*$`},
	} {
		out, stderr, err := c.Output(ctx, "task", "exec", "--exec-id", "check", "e2e-net-exec", "/bin/sh", "-x", "-c", tc.cmd)
		if err != nil || !regexp.MustCompile(tc.want).MatchString(strings.TrimSpace(out)) {
			t.Errorf("network/kube_proxy (distroless-iptables): %s: %v %q (stderr %q), want it to match %q", tc.cmd, err, out, stderr, tc.want)
		}
	}

	// pause: the program upstream's image runs, with its version, as the
	// user upstream's image names; it runs until signalled and then exits
	// cleanly, as a sandbox must.
	out, err = p.run(ctx, nil, Pause, "/pause", "-v")
	if err != nil || strings.TrimSpace(out) != "pause.c "+pauseVersion {
		t.Errorf("pause -v: %q (%v), want %q", out, err, "pause.c "+pauseVersion)
	}
	checkRunsUntilSignalled(ctx, t, c, Pause, "65535", 0)
	// agnhost's default command (Entrypoint /agnhost, Cmd pause): the
	// container the suite makes of NewAgnhostPod with no arguments. It
	// exits 2 on SIGTERM (agnhost/pause/pause.go: 1 for SIGINT, 2 for
	// SIGTERM).
	checkRunsUntilSignalled(ctx, t, c, Agnhost, "0", 2)
}
