package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/enidnet/enid/internal/roottest"
)

// TestDemo is acceptance 7: `enid demo` runs to completion as root (the
// built binary, with enid-cni beside it, under a timeout), in both modes.
func TestDemo(t *testing.T) {
	for _, mode := range []string{"shared-eni", "exclusive-eni"} {
		t.Run(mode, func(t *testing.T) { demo(t, mode) })
	}
}

func demo(t *testing.T, mode string) {
	roottest.Need(t)
	if binDir == "" {
		t.Fatal("binaries were not built (TestMain)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	code, out, stderr := runEnid(ctx, t, os.Environ(), "demo", "--mode", mode, "--work-dir", t.TempDir())
	if code != 0 || ctx.Err() != nil {
		t.Fatalf("enid demo: exit %d (ctx %v)\nstdout:\n%s\nstderr:\n%s", code, ctx.Err(), out, stderr)
	}
	for _, want := range []string{"Pinging through the simulated VPC", "Done."} {
		if !strings.Contains(out, want) {
			t.Errorf("enid demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FAILED") {
		t.Errorf("enid demo reports a failure:\n%s", out)
	}
}
