// Command enid is the node agent and its CLI: run, plan, status, sweep,
// install-cni, sim, demo, version. This file holds wiring and flags only.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		// An exit code alone (plan --detailed-exitcode's 2) is not an error
		// to print.
		if ee, ok := err.(*exitError); !ok || ee.err != nil {
			fmt.Fprintln(os.Stderr, "enid:", err)
		}
		os.Exit(exitCode(err))
	}
}
