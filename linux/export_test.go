package linux

import "sync/atomic"

// ConntrackEntries exposes conntrackEntries to the package's black-box
// tests.
var ConntrackEntries = conntrackEntries

// DumpsMade returns how many netlink dumps of each kind (what they list:
// "list rules", "list links", ...) the package has started so far.
func DumpsMade() map[string]int64 {
	m := map[string]int64{}
	dumpsMade.Range(func(k, v any) bool {
		m[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return m
}
