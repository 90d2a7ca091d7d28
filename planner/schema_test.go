package planner_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/planner/plannertest"
)

// TestSchemaRejects shows the validator can fail: documents that break the
// schema in different ways are refused.
func TestSchemaRejects(t *testing.T) {
	s := loadSchema(t)
	good, err := json.Marshal(planner.Plan{Complete: true, Memory: planner.Memory{Version: planner.MemoryVersion}})
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.Validate(good); len(errs) > 0 {
		t.Fatalf("empty plan does not validate: %v", errs)
	}
	for name, doc := range map[string]string{
		"missing field":  strings.Replace(string(good), `"formatVersion":1,`, "", 1),
		"unknown field":  strings.Replace(string(good), `"complete":true`, `"complete":true,"extra":1`, 1),
		"wrong version":  strings.Replace(string(good), `"formatVersion":1`, `"formatVersion":2`, 1),
		"wrong type":     strings.Replace(string(good), `"cloudCalls":0`, `"cloudCalls":"0"`, 1),
		"unknown kind":   strings.Replace(string(good), `"actions":[]`, `"actions":[{"id":0,"kind":"Reboot","target":"x","reason":{"code":"ready"}}]`, 1),
		"unknown reason": strings.Replace(string(good), `"actions":[]`, `"actions":[{"id":0,"kind":"SetupPod","target":"x","reason":{"code":"because"}}]`, 1),
		"negative count": strings.Replace(string(good), `"nodeChanges":0`, `"nodeChanges":-1`, 1),
		"long token":     strings.Replace(string(good), `"actions":[]`, `"actions":[{"id":0,"kind":"AssignIPs","target":"x","reason":{"code":"ready"},"clientToken":"`+strings.Repeat("x", 65)+`"}]`, 1),
		"bad phase":      strings.Replace(string(good), `"statuses":[]`, `"statuses":[{"key":{"ContainerID":"c","IfName":"eth0"},"phase":"Running","reasonCode":"ready"}]`, 1),
		"missing pool":   strings.Replace(string(good), `"pool":`, `"pooh":`, 1),
		"not a /28":      strings.Replace(string(good), `"actions":[]`, `"actions":[{"id":0,"kind":"UnassignIPs","target":"x","reason":{"code":"idle-above-max"},"ipv4Prefixes":["10.0.0.0/24"]}]`, 1),
		"11 prefixes":    strings.Replace(string(good), `"actions":[]`, `"actions":[{"id":0,"kind":"AssignIPs","target":"x","reason":{"code":"pods-waiting"},"ipv4PrefixCount":11}]`, 1),
	} {
		if errs := s.Validate([]byte(doc)); len(errs) == 0 {
			t.Errorf("%s: validated, want an error:\n%s", name, doc)
		}
	}
}

func loadSchema(t *testing.T) *plannertest.Schema {
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
