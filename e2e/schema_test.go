package e2e

import (
	"os"
	"testing"

	"github.com/enidnet/enid/planner/plannertest"
)

// loadPlanSchema loads docs/plan.schema.json into the validator the planner's
// own tests use; here it checks what the binary prints.
func loadPlanSchema(t *testing.T) *plannertest.Schema {
	t.Helper()
	b, err := os.ReadFile("../docs/plan.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := plannertest.NewSchema(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPlanSchemaValidatorFails shows the validator can fail on the kinds of
// damage the plan test would need it to catch.
func TestPlanSchemaValidatorFails(t *testing.T) {
	s := loadPlanSchema(t)
	for name, doc := range map[string]string{
		"not an object":   `[]`,
		"missing fields":  `{"formatVersion":1}`,
		"wrong version":   `{"formatVersion":2}`,
		"unknown field":   `{"formatVersion":1,"surprise":true}`,
		"wrong type":      `{"formatVersion":1,"complete":"yes"}`,
		"negative count":  `{"formatVersion":1,"cloudCalls":-1}`,
		"unknown kind":    `{"formatVersion":1,"actions":[{"id":0,"kind":"Reboot","target":"x","reason":{"code":"ready"}}]}`,
		"truncated input": `{"formatVersion":1,`,
	} {
		if errs := s.Validate([]byte(doc)); len(errs) == 0 {
			t.Errorf("%s: %s validated", name, doc)
		}
	}
}
