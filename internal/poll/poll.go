// Package poll waits for a condition by asking it again at an interval:
// the harness's and the demo's way to wait for the agent's files, which
// they read but do not watch. The agent itself never polls (it is woken).
package poll

import (
	"context"
	"fmt"
	"time"

	"github.com/enidnet/enid/internal/clock"
)

// Until calls cond every interval until it holds, fails, or timeout
// passes on clk, or ctx ends. The caller gives its own clock (the demo and
// the bench wait on the wall clock, as their user does).
func Until(ctx context.Context, clk clock.Clock, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := clk.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if clk.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		if err := clk.Sleep(ctx, interval); err != nil {
			return err
		}
	}
}
