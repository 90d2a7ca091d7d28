package reconcile

import (
	"testing"
	"time"

	"github.com/enidnet/enid/observed"
)

// TestNeedsRefreshInTransit: an ENI in an asynchronous transition asks for
// a full observation every transitRefresh, or its end would go unseen until
// the next resync (a crash mid-attach left it so).
func TestNeedsRefreshInTransit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		status observed.ENIStatus
		after  time.Duration
		want   bool
	}{
		{"in use, fresh", observed.ENIInUse, transitRefresh, false},
		{"available, fresh", observed.ENIAvailable, transitRefresh, false},
		{"attaching, just observed", observed.ENIAttaching, transitRefresh / 2, false},
		{"attaching", observed.ENIAttaching, transitRefresh, true},
		{"detaching", observed.ENIDetaching, transitRefresh, true},
		{"deleting", observed.ENIDeleting, transitRefresh, true},
		{"in use, resync due", observed.ENIInUse, time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c cache
			c.replace(observed.State{At: t0, Complete: true, ENIs: []observed.ENI{{ID: "eni-1", Status: tc.status}}})
			if got := c.needsRefresh(t0.Add(tc.after), time.Minute); got != tc.want {
				t.Errorf("needsRefresh %s after a full observation = %v, want %v", tc.after, got, tc.want)
			}
		})
	}
}
