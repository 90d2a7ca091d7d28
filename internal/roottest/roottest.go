// Package roottest decides what a test that needs root does without it: it
// skips on a developer machine, and fails when CI=true or
// ENID_REQUIRE_PRIVILEGED=1, so a CI run can never pass by skipping the
// privileged tests.
package roottest

import (
	"os"
	"testing"
)

// Required reports whether privileged tests must run (not skip).
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("ENID_REQUIRE_PRIVILEGED") == "1"
}

// Need skips t when the process is not root, or fails it when privileged
// tests are required.
func Need(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if Required() {
		t.Fatalf("needs root, and privileged tests are required here (CI=true or ENID_REQUIRE_PRIVILEGED=1)")
	}
	t.Skip("skipped: needs root (run as root, or set CI=true to make this a failure)")
}
