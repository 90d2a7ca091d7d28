//go:build race

package simulation

// raceEnabled: the race detector slows a run about threefold; TestSimulate
// runs fewer seeds under it (.ci/run runs the full set without it).
const raceEnabled = true
