package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// A config listing one good and one unknown vSwitch (a typo) serves pods
// from the good one and names the unknown one in `enid plan` and
// `enid status`.
func TestUnknownVSwitchIsSkipped(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	good := n.sn.Instance.VSwitchID
	cfg := strings.Replace(n.Config(testPool), "["+good, "[vsw-typo, "+good, 1)
	if !strings.Contains(cfg, "vsw-typo") {
		t.Fatalf("config does not list %s:\n%s", good, cfg)
	}
	if err := os.WriteFile(n.cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n.startAgent()
	p := n.newPod("p0")
	if _, err := n.add(ctx, p); err != nil {
		t.Fatalf("ADD with one good and one unknown vSwitch: %v", err)
	}
	if code, out, stderr := n.plan(ctx); code != 0 && code != 2 || !strings.Contains(out, "vsw-typo does not exist") {
		t.Errorf("enid plan: exit %d, does not name vsw-typo:\n%s%s", code, out, stderr)
	}
	waitFor(t, 10*time.Second, "enid status naming vsw-typo", func() (bool, string) {
		_, out, stderr := n.enid(ctx, "status", "--run-dir", n.runDir)
		return strings.Contains(out, "vsw-typo"), out + stderr
	})
}
