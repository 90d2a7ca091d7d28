package main

import (
	"os"
	"runtime/debug"
)

// agentGCPercent is the agent's garbage-collection target (GOGC) unless
// the environment sets one. Every pass allocates in proportion to the pods
// on the node (a plan, a snapshot's copies) over a live heap of a few tens
// of MiB, so at Go's default (100) a node of 1,000 pods collects every few
// passes: a fifth of the agent's CPU per pod start, on the same two cores
// as the pod's netlink work. At 200, measured with the node-scale bench
// (docs/benchmarks.md, "The agent's own garbage"), CPU per pod start at
// 1,000 pods falls from 16.5 to 13.3 ms and RSS rises from 49 to 61 MiB
// (target: under 100). GOGC or GOMEMLIMIT in the environment (the
// DaemonSet's env) still decide.
const agentGCPercent = 200

// tuneGC sets agentGCPercent unless GOGC is set; it returns the GOGC now
// in force (-1: off).
func tuneGC() int {
	if _, set := os.LookupEnv("GOGC"); set {
		p := debug.SetGCPercent(-1) // read it: set it back at once
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(agentGCPercent)
	return agentGCPercent
}
