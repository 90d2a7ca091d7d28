package linux

// ConntrackEntries exposes conntrackEntries to the package's black-box
// tests.
var ConntrackEntries = conntrackEntries
