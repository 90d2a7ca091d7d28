package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/linux/linuxtest"
)

// criPool is testPool plus extra. The agent runs with the default resync
// period, so nothing but a DEL removes a status within a test.
func criPool(extra string) string { return testPool + extra }

// stopp stops a sandbox (kubelet's StopPodSandbox, which runs CNI DEL) and
// then checks that enid's status of it is gone: DEL is authoritative, so
// when it returns the attachment is torn down, not waiting for a timeout.
func (c *criNode) stopp(ctx context.Context, s *sandbox) {
	c.t.Helper()
	start := time.Now()
	c.crictl(ctx, "stopp", s.id)
	c.t.Logf("sandbox %s: stopp took %s", s.name, time.Since(start).Round(time.Millisecond))
	c.checkGoneAfterDEL(s)
}

// checkGoneAfterDEL asserts that s has no status file: DEL is authoritative
// (issue #10), so when it returns the attachment is torn down, not left for
// a timeout or a later wake-up.
func (c *criNode) checkGoneAfterDEL(s *sandbox) {
	c.t.Helper()
	if _, err := c.statusOf(s.pod("")); !errors.Is(err, fs.ErrNotExist) {
		c.t.Errorf("sandbox %s (%s): status still there after stopp returned (err %v): DEL did not tear it down", s.name, s.id[:12], err)
	}
}

// rmp removes a stopped sandbox.
func (c *criNode) rmp(ctx context.Context, s *sandbox) {
	c.t.Helper()
	c.crictl(ctx, "rmp", s.id)
}

// checkSandboxes checks each sandbox through the CRI and the node: Ready,
// the address inspectp reports is the one enid bound (statuses, kernel,
// simulator) and the one inside the sandbox's netns; then pings each from
// the next.
func (c *criNode) checkSandboxes(ctx context.Context, sbs []*sandbox) {
	c.t.Helper()
	pods := make([]*pod, len(sbs))
	for i, s := range sbs {
		info := c.inspectp(ctx, s.id)
		if info.state != "SANDBOX_READY" || info.netns == "" || !info.ip.IsValid() {
			c.t.Fatalf("sandbox %s: inspectp says state %s, netns %q, ip %v", s.name, info.state, info.netns, info.ip)
		}
		pods[i] = s.pod(info.netns)
		st, err := c.statusOf(pods[i])
		if err != nil {
			c.t.Fatalf("sandbox %s: %v", s.name, err)
		}
		if len(st.IPs) == 0 || st.IPs[0].Address.Addr() != info.ip {
			c.t.Errorf("sandbox %s: inspectp says %s, enid's status %v", s.name, info.ip, st.IPs)
		}
	}
	// Ready, one address each, routed to its veth, present in its netns and
	// held by an owned ENI.
	c.checkBindings(pods)
	if len(pods) > 1 {
		for i, p := range pods {
			j := (i + 1) % len(pods)
			dst, err := c.statusOf(pods[j])
			if err != nil || len(dst.IPs) == 0 {
				c.t.Fatalf("status of %s: %v", pods[j].Name, err)
			}
			if err := linuxtest.Ping(ctx, p.NetNS, dst.IPs[0].Address.Addr()); err != nil {
				c.t.Errorf("%s -> %s: %v", p.Name, pods[j].Name, err)
			}
		}
	}
}

// leakCheck is the end of every CRI test: no sandbox left in containerd,
// no runtime cache record left for them, and the node back to a settled
// pool (no status, clean node netns, pool in its bounds, empty plan).
func (c *criNode) leakCheck(ctx context.Context, sbs []*sandbox) {
	c.t.Helper()
	if out := strings.TrimSpace(c.crictl(ctx, "pods", "-q")); out != "" {
		c.t.Errorf("sandboxes left in containerd: %s", out)
	}
	ids := make([]string, len(sbs))
	for i, s := range sbs {
		ids[i] = s.id
	}
	if left := runtimeRecords(ids); len(left) > 0 {
		c.t.Errorf("containerd left libcni cache records: %v", left)
	}
	c.waitSettled(2, 6, 60*time.Second)
}

func newSandboxes(prefix string, k int) []*sandbox {
	sbs := make([]*sandbox, k)
	for i := range sbs {
		name := fmt.Sprintf("%s-%d", prefix, i)
		sbs[i] = &sandbox{name: name, uid: "uid-" + name}
	}
	return sbs
}

// parallel runs f on every sandbox at once and fails the test on any error.
func parallel(t *testing.T, sbs []*sandbox, f func(*sandbox) error) {
	t.Helper()
	errs := make([]error, len(sbs))
	var wg sync.WaitGroup
	for i, s := range sbs {
		wg.Go(func() { errs[i] = f(s) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestCRIPodLifecycle drives one pod, then ten in parallel, through
// containerd's CRI as kubelet does (runp, inspectp, stopp, rmp): each
// sandbox gets the address enid bound, inside its own netns, the sandboxes
// reach each other, and after stopp each is torn down (the DEL check),
// leaving nothing behind.
func TestCRIPodLifecycle(t *testing.T) {
	c := newCRINode(t, nodeOptions{extraConfig: criPool("")})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.startAgent()
	c.waitReady(30 * time.Second)

	one := newSandboxes("solo", 1)
	if err := c.runp(ctx, one[0]); err != nil {
		t.Fatal(err)
	}
	c.checkSandboxes(ctx, one)
	c.stopp(ctx, one[0])
	c.rmp(ctx, one[0])

	ten := newSandboxes("web", 10)
	parallel(t, ten, func(s *sandbox) error { return c.runp(ctx, s) })
	c.checkSandboxes(ctx, ten)
	parallel(t, ten, func(s *sandbox) error {
		if _, err := c.crictlCtx(ctx, "stopp", s.id); err != nil {
			return err
		}
		c.checkGoneAfterDEL(s)
		_, err := c.crictlCtx(ctx, "rmp", s.id)
		return err
	})
	c.leakCheck(ctx, append(one, ten...))
}

// TestCRIStickyAnnotation: the sticky annotation set on the pod reaches
// enid through containerd (runtimeConfig io.kubernetes.cri.pod-annotations):
// the pod's entry carries it, ordinary sandboxes created after the pod is
// gone do not get its address, and a new sandbox of the same pod does.
func TestCRIStickyAnnotation(t *testing.T) {
	c := newCRINode(t, nodeOptions{extraConfig: criPool("stickyIPHold: 15s\n")})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.startAgent()
	c.waitReady(30 * time.Second)

	sticky := map[string]string{desired.AnnotationStickyIP: "true"}
	first := &sandbox{name: "db-0", uid: "uid-db-0-a", annotations: sticky}
	if err := c.runp(ctx, first); err != nil {
		t.Fatal(err)
	}
	key := desired.Key{ContainerID: first.id, IfName: "eth0"}
	b, err := os.ReadFile(filepath.Join(c.runDir, "pods", desired.EntryFileName(key)))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := desired.ParseEntry(b); err != nil || !e.WantsStickyIP() {
		t.Fatalf("entry of db-0 written by enid-cni under containerd: sticky %v, err %v, want the annotation:\n%s", e.WantsStickyIP(), err, b)
	}
	ip := c.inspectp(ctx, first.id).ip
	c.stopp(ctx, first)
	c.rmp(ctx, first)
	waitFor(t, 10*time.Second, "db-0 torn down", func() (bool, string) {
		_, err := c.statusOf(first.pod(""))
		return errors.Is(err, fs.ErrNotExist), fmt.Sprint(err)
	})

	// Past the cooldown, ordinary pods take whatever is free, but not db-0's.
	time.Sleep(500 * time.Millisecond)
	others := newSandboxes("web", 3)
	parallel(t, others, func(s *sandbox) error { return c.runp(ctx, s) })
	for _, s := range others {
		if got := c.inspectp(ctx, s.id).ip; got == ip {
			t.Errorf("ordinary sandbox %s got %s, held for the sticky pod db-0", s.name, got)
		}
	}
	// A new sandbox of the pod (a StatefulSet pod rescheduled here).
	again := &sandbox{name: "db-0", uid: "uid-db-0-b", annotations: sticky}
	if err := c.runp(ctx, again); err != nil {
		t.Fatal(err)
	}
	if got := c.inspectp(ctx, again.id).ip; got != ip {
		t.Errorf("sticky pod db-0 came back with %s, had %s", got, ip)
	}
	all := append(others, again)
	c.checkSandboxes(ctx, all)
	parallel(t, all, func(s *sandbox) error {
		if _, err := c.crictlCtx(ctx, "stopp", s.id); err != nil {
			return err
		}
		_, err := c.crictlCtx(ctx, "rmp", s.id)
		return err
	})
	c.leakCheck(ctx, append(all, first))
}

// TestCRIStopWithAgentDown: with the agent stopped, stopp and rmp still
// succeed promptly (DEL never waits on a dead agent), and the agent tears
// the pods down when it comes back.
func TestCRIStopWithAgentDown(t *testing.T) {
	c := newCRINode(t, nodeOptions{extraConfig: criPool("")})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.startAgent()
	c.waitReady(30 * time.Second)
	sbs := newSandboxes("app", 3)
	parallel(t, sbs, func(s *sandbox) error { return c.runp(ctx, s) })
	c.checkSandboxes(ctx, sbs)

	c.agent.stop(t)
	// crictl's own timeout (60s) is the bound: a DEL that waited on the
	// dead agent would fail it.
	parallel(t, sbs, func(s *sandbox) error {
		if _, err := c.crictlCtx(ctx, "stopp", s.id); err != nil {
			return err
		}
		_, err := c.crictlCtx(ctx, "rmp", s.id)
		return err
	})
	// DEL did its part without the agent: the entries are gone.
	for _, s := range sbs {
		key := desired.Key{ContainerID: s.id, IfName: "eth0"}
		if _, err := os.Stat(filepath.Join(c.runDir, "pods", desired.EntryFileName(key))); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("sandbox %s: entry still there after stopp with the agent down (%v)", s.name, err)
		}
	}
	c.startAgent()
	c.waitReady(30 * time.Second)
	c.leakCheck(ctx, sbs)
}

// TestCRIAgentKilledDuringStarts: the agent is SIGKILLed once the CNI ADDs
// of ten starting sandboxes are under way, and restarted 2 s later.
// ADD waits at most 1.5 s here, so some runp fail and containerd cleans
// their sandboxes up (a DEL after a failed ADD); those are retried with the
// next attempt, as kubelet does. All end Ready with distinct addresses that
// reach each other, and after stopp/rmp nothing leaks.
func TestCRIAgentKilledDuringStarts(t *testing.T) {
	c := newCRINode(t, nodeOptions{extraConfig: criPool(""), addTimeout: 1500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c.startAgent()
	c.waitReady(30 * time.Second)

	sbs := newSandboxes("burst", 10)
	errs := make([]error, len(sbs))
	var wg sync.WaitGroup
	for i, s := range sbs {
		wg.Go(func() { errs[i] = c.runp(ctx, s) })
	}
	// Kill once enid-cni has written the first entry: containerd is in
	// the CNI ADDs, some answered, some not.
	waitFor(t, 30*time.Second, "a CNI ADD under way", func() (bool, string) {
		ents, err := os.ReadDir(filepath.Join(c.runDir, "pods"))
		return err == nil && len(ents) > 0, fmt.Sprint(err)
	})
	time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
	c.agent.kill()
	t.Logf("agent killed with %d statuses published", len(c.statuses()))
	// Down longer than an ADD waits: every ADD still waiting fails.
	time.Sleep(2 * time.Second)
	c.startAgent()
	wg.Wait()
	c.waitReady(30 * time.Second)
	var all []*sandbox // every sandbox created, for the leak check
	all = append(all, sbs...)
	retried := 0
	for i, s := range sbs {
		for errs[i] != nil {
			retried++
			if s.attempt >= 5 {
				t.Fatalf("sandbox %s: runp failed %d times, last: %v", s.name, s.attempt+1, errs[i])
			}
			msg := strings.TrimSpace(errs[i].Error())
			t.Logf("sandbox %s: runp failed across the crash, retrying: %s", s.name, msg[strings.LastIndex(msg, "\n")+1:])
			retry := &sandbox{name: s.name, uid: s.uid, attempt: s.attempt + 1}
			errs[i] = c.runp(ctx, retry)
			sbs[i], s = retry, retry
			all = append(all, retry)
		}
	}
	t.Logf("%d runp retried after the agent was killed", retried)
	c.checkSandboxes(ctx, sbs)
	parallel(t, sbs, func(s *sandbox) error {
		if _, err := c.crictlCtx(ctx, "stopp", s.id); err != nil {
			return err
		}
		_, err := c.crictlCtx(ctx, "rmp", s.id)
		return err
	})
	var created []*sandbox
	for _, s := range all {
		if s.id != "" && !slices.Contains(created, s) {
			created = append(created, s)
		}
	}
	c.leakCheck(ctx, created)
}
