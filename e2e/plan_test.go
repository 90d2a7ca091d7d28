package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlanExitCodes is acceptance 6: `enid plan --detailed-exitcode` exits
// 2 while work is pending (before the agent first runs; with a new pod
// entry while the agent is stopped) and 0 once the agent has converged,
// and `--output json` validates against docs/plan.schema.json each time.
func TestPlanExitCodes(t *testing.T) {
	n := newNode(t, nodeOptions{extraConfig: testPool})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema := loadPlanSchema(t)

	// planState runs plan twice (text with --detailed-exitcode, then JSON)
	// and returns the exit code and the decoded JSON.
	planState := func() (int, map[string]any, string) {
		t.Helper()
		code, text, stderr := n.plan(ctx, "--detailed-exitcode")
		if code == 1 {
			t.Fatalf("enid plan failed:\n%s%s", text, stderr)
		}
		jcode, out, stderr := n.plan(ctx, "--output", "json")
		if jcode != 0 {
			t.Fatalf("enid plan --output json: exit %d\n%s", jcode, stderr)
		}
		if errs := schema.Validate([]byte(out)); len(errs) > 0 {
			t.Fatalf("enid plan --output json does not match docs/plan.schema.json:\n%s\n%s", strings.Join(errs, "\n"), out)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		return code, doc, text
	}
	kinds := func(doc map[string]any) []string {
		var ks []string
		for _, a := range doc["actions"].([]any) {
			ks = append(ks, fmt.Sprint(a.(map[string]any)["kind"]))
		}
		return ks
	}
	waitConverged := func(what string) {
		t.Helper()
		waitFor(t, 30*time.Second, what, func() (bool, string) {
			code, doc, text := planState()
			return code == 0 && doc["empty"] == true, fmt.Sprintf("exit %d:\n%s", code, text)
		})
	}

	// Before the agent ever ran: the pool must be built.
	code, doc, text := planState()
	if code != 2 || doc["empty"] != false {
		t.Fatalf("plan before the agent started: exit %d, empty %v, want 2 and false:\n%s", code, doc["empty"], text)
	}
	t.Logf("before the agent: exit %d, actions %v", code, kinds(doc))
	if ks := kinds(doc); !strings.Contains(strings.Join(ks, " "), "CreateENI") {
		t.Errorf("plan before the agent started has actions %v, want a CreateENI", ks)
	}

	n.startAgent()
	n.waitReady(30 * time.Second)
	waitConverged("plan empty once the agent has warmed its pool")

	// A pod entry arrives while the agent is stopped.
	n.agent.stop(t)
	p := n.newPod("plan0")
	added := make(chan error, 1)
	go func() {
		_, err := n.add(ctx, p)
		added <- err
	}()
	entry := filepath.Join(n.runDir, "pods", p.ContainerID+"_"+p.IfName+".json")
	waitFor(t, 10*time.Second, "the ADD's entry", func() (bool, string) {
		_, err := os.Stat(entry)
		return err == nil, fmt.Sprint(err)
	})
	code, doc, text = planState()
	t.Logf("new entry, agent stopped: exit %d, actions %v", code, kinds(doc))
	if code != 2 {
		t.Errorf("plan with a new entry and the agent stopped: exit %d, want 2:\n%s", code, text)
	}
	if ks := kinds(doc); !strings.Contains(strings.Join(ks, " "), "SetupPod") {
		t.Errorf("plan with a new entry has actions %v, want a SetupPod", ks)
	}

	n.startAgent()
	if err := <-added; err != nil {
		t.Fatalf("ADD once the agent is back: %v", err)
	}
	waitConverged("plan empty once the pod is set up")
}
