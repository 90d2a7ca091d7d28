package planner

import (
	"fmt"
	"testing"
	"time"
)

// TestSpreadOffsetEven checks that a fleet's offsets cover the window
// evenly: a thousand nodes with IDs as ECS and the simulator make them
// (differing in the last digits) land in every tenth of the window at
// about a tenth each, never all at one instant.
func TestSpreadOffsetEven(t *testing.T) {
	const n, window, bins = 1000, 5 * time.Second, 10
	for _, format := range []string{"i-sim%014d", "i-bp1%015x"} {
		var count [bins]int
		for i := range n {
			id := fmt.Sprintf(format, i+1)
			d := SpreadOffset(id, window)
			if d < 0 || d >= window {
				t.Fatalf("%s: offset %v outside [0, %v)", id, d, window)
			}
			if again := SpreadOffset(id, window); again != d {
				t.Fatalf("%s: offset %v then %v: must be deterministic", id, d, again)
			}
			count[int(d*bins/window)]++
		}
		for b, c := range count {
			// A tenth each is 100; binomial noise keeps it well within 60-140.
			if c < 60 || c > 140 {
				t.Errorf("%s: %d of %d nodes in tenth %d of the window (want about %d): %v", format, c, n, b, n/bins, count)
			}
		}
	}
	if d := SpreadOffset("i-1", 0); d != 0 {
		t.Errorf("window 0: offset %v, want 0", d)
	}
}
