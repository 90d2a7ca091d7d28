package simvpc_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/enidnet/enid/internal/roottest"
	"github.com/enidnet/enid/testbed/simvpc"
	"golang.org/x/sys/unix"
)

// TestNamespacesSurviveALaterNetnsDirMount: on a fresh machine /run/netns
// is a plain directory until the first `ip netns add` bind-mounts it onto
// itself. A topology made before that, its namespaces mounted on files of
// the plain directory, would be hidden beneath that mount and its Close
// would fail (remove: EBUSY). The topology makes the directory a mount
// point first, as ip does. The test runs itself again in a mount namespace
// of its own (unshare -m) where /run/netns is first made a plain directory
// again.
func TestNamespacesSurviveALaterNetnsDirMount(t *testing.T) {
	roottest.Need(t)
	if os.Getenv("ENID_NETNS_DIR_CHILD") == "" {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Fatalf("unshare (util-linux, on every Debian machine) is missing: %v", err)
		}
		cmd := exec.Command("unshare", "-m", "--propagation", "private", os.Args[0],
			"-test.run", "^"+t.Name()+"$", "-test.v")
		cmd.Env = append(os.Environ(), "ENID_NETNS_DIR_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("in a mount namespace of its own: %v\n%s", err, out)
		}
		return
	}
	// Here /run/netns is this mount namespace's to change: unmount it
	// until it is the plain directory of a fresh machine.
	for range 10 {
		if err := unix.Unmount("/run/netns", unix.MNT_DETACH); err != nil {
			break
		}
	}
	tp, err := simvpc.New("enidtnsdir")
	if err != nil {
		t.Fatal(err)
	}
	// Someone else's first `ip netns add`: it makes /run/netns a mount
	// point unless it already is one.
	if out, err := exec.Command("ip", "netns", "add", "enidtnsdir-ip").CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "del", "enidtnsdir-ip").CombinedOutput(); err != nil {
		t.Fatalf("ip netns del: %v\n%s", err, out)
	}
	if err := tp.Close(); err != nil {
		t.Fatalf("close the topology: %v", err)
	}
}
