package reconcile

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/testbed/cnirun"
)

// containerdLoopback is the record containerd 1.6.20's CRI writes for
// every sandbox's loopback network beside the main network's, byte for byte
// as TestCRIPodLifecycle's containerd wrote it (its config is the list
// {"cniVersion": "0.3.1", "name": "cni-loopback", "plugins": [{"type":
// "loopback"}]}); CONTAINER stands for the sandbox ID.
const containerdLoopback = `{"kind":"cniCacheV1","containerId":"CONTAINER","config":"ewoiY25pVmVyc2lvbiI6ICIwLjMuMSIsCiJuYW1lIjogImNuaS1sb29wYmFjayIsCiJwbHVnaW5zIjogW3sKICAidHlwZSI6ICJsb29wYmFjayIKfV0KfQ==","ifName":"lo","networkName":"cni-loopback","cniArgs":[["IgnoreUnknown","1"],["K8S_POD_NAMESPACE","default"],["K8S_POD_NAME","p-CONTAINER"],["K8S_POD_INFRA_CONTAINER_ID","CONTAINER"],["K8S_POD_UID","uid-CONTAINER"]],"capabilityArgs":{"io.kubernetes.cri.pod-annotations":null},"result":{"cniVersion":"0.3.1","dns":{},"interfaces":[{"mac":"00:00:00:00:00:00","name":"lo","sandbox":"/var/run/netns/cni-a3d238c5-b65c-edd8-acbe-fcfa7d5792ca"}],"ips":[{"address":"127.0.0.1/8","interface":0,"version":""},{"address":"::1/128","interface":0,"version":""}]}}`

// The runtime's cache holds a loopback record beside each of enid's, as
// containerd's does: enid_runtime_attachments counts enid's network only
// (3 for 3 pods, not 6), and a loopback record left alone does not keep an
// attachment whose entry vanished without a DEL.
func TestRuntimeAttachmentsAreEnidsOnly(t *testing.T) {
	pluginDir, err := cnirun.Plugin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roottest.Need(t)
	w := newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond}},
		"pool:\n  minIdle: 2\n  maxIdle: 6\n  batch: 5\n  cooldown: 1m\n")
	cacheDir := filepath.Join(w.dir, "cni-cache")
	results := filepath.Join(cacheDir, "results")
	w.paths.Hints = desired.HintSources{CNIResultsDir: results}
	stop := w.start(NewNoDatapathMust(t))
	defer stop()
	rt, err := cnirun.New(pluginDir, cacheDir, cnirun.Conflist(filepath.Dir(w.paths.Entries), time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ns.Close()
		testutils.UnmountNS(ns)
	}()
	ctx := context.Background()
	ids := []string{"c1", "c2", "c3"}
	for _, id := range ids {
		if _, err := rt.Add(ctx, cnirun.Pod{ContainerID: id, NetNS: ns.Path(), IfName: "eth0", Namespace: "default", Name: "p-" + id, UID: "uid-" + id}); err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		lo := strings.ReplaceAll(containerdLoopback, "CONTAINER", id)
		if err := os.WriteFile(filepath.Join(results, "cni-loopback-"+id+"-lo"), []byte(lo), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := filepath.Glob(filepath.Join(results, "*"))
	if len(all) != 2*len(ids) {
		t.Fatalf("runtime cache: %v, want a record of each network for each pod", all)
	}
	// The watcher wakes the agent for each record; give it the time to
	// read the last, and check it never counts more than enid's.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := gauge(t, w.agent.metrics, "enid_runtime_attachments"); n > float64(len(ids)) {
			t.Fatalf("enid_runtime_attachments = %v with %d pods: records of other networks counted", n, len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := gauge(t, w.agent.metrics, "enid_runtime_attachments"); n != float64(len(ids)) {
		t.Fatalf("enid_runtime_attachments = %v, want %d", n, len(ids))
	}

	// c2's entry and enid's record of it go without a DEL; containerd's
	// loopback record of c2 stays. It says nothing of c2's enid attachment,
	// which is torn down.
	if err := desired.NewEntryStore(w.paths.Entries).Remove(desired.Key{ContainerID: "c2", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(results, "enid-c2-eth0")); err != nil {
		t.Fatal(err)
	}
	w.waitFor("c2 torn down with only its loopback record left", 5*time.Second, func() bool {
		_, ok := w.statuses()["c2_eth0"]
		return !ok
	})
	for _, id := range []string{"c1", "c3"} {
		if _, ok := w.statuses()[id+"_eth0"]; !ok {
			t.Fatalf("%s lost its status", id)
		}
	}
}
