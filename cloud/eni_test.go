package cloud

import (
	"testing"

	"github.com/enidnet/enid/observed"
)

func TestDeadEnd(t *testing.T) {
	const (
		av = observed.ENIAvailable
		at = observed.ENIAttaching
		iu = observed.ENIInUse
		de = observed.ENIDetaching
		dl = observed.ENIDeleting
	)
	tests := []struct {
		want observed.ENIStatus
		seen []observed.ENIStatus
		dead bool
	}{
		{iu, []observed.ENIStatus{av}, false}, // attach not visible yet
		{iu, []observed.ENIStatus{at}, false},
		{iu, []observed.ENIStatus{av, at}, false},
		{iu, []observed.ENIStatus{at, av}, true}, // attach failed
		{iu, []observed.ENIStatus{de}, true},
		{iu, []observed.ENIStatus{dl}, true},
		{av, []observed.ENIStatus{iu}, false}, // detach not visible yet
		{av, []observed.ENIStatus{de}, false},
		{av, []observed.ENIStatus{dl}, true},
	}
	for _, tt := range tests {
		if got := deadEnd(tt.want, tt.seen); got != tt.dead {
			t.Errorf("deadEnd(%s, %v) = %v, want %v", tt.want, tt.seen, got, tt.dead)
		}
	}
}
