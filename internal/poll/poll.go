// Package poll waits for a condition by asking it again at an interval:
// the harness's and the demo's way to wait for the agent's files, which
// they read but do not watch. The agent itself never polls (it is woken).
package poll

import (
	"context"
	"fmt"
	"time"
)

// Until calls cond every interval until it holds, fails, or timeout
// passes, or ctx ends.
func Until(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
