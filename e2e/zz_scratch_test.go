package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

func TestScratchTypoLate(t *testing.T) {
	n := newNode(t, nodeOptions{configMap: true, sim: ecssim.Config{SecurityGroups: []string{ecssim.DefaultSecurityGroup}}})
	n.swapConfigMap(n.withSecurityGroups("  securityGroups: [sg-sim]\n", testPool))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.startAgent()
	n.waitReady(30 * time.Second)
	n.waitPlanEmpty(ctx)
	n.swapConfigMap(n.withSecurityGroups("  securityGroups: [sg-typo]\n", testPool))
	time.Sleep(time.Second)
	p := n.newPod("late")
	actx, acancel := context.WithTimeout(ctx, 4*time.Second)
	_, err := n.add(actx, p)
	acancel()
	st, serr := n.statusOf(p)
	t.Logf("late: %v\nstatus %s %s %s (%v)", err, st.Phase, st.ReasonCode, st.Reason, serr)
	_, out, _ := n.plan(ctx)
	t.Logf("%s", out)
	n.delAll(ctx, []*pod{p})
}
