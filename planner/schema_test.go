package planner_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/enidnet/enid/planner"
)

// schema is the subset of JSON Schema (2020-12) that docs/plan.schema.json
// uses: type, const, enum, properties, required, additionalProperties,
// items, minimum, maximum, maxLength and local $ref.
type schema struct {
	root map[string]any
}

func loadSchema(t *testing.T) *schema {
	t.Helper()
	b, err := os.ReadFile("../docs/plan.schema.json")
	if err != nil {
		t.Fatalf("read schema: %v", err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("parse schema: %v", err)
	}
	return &schema{root: root}
}

// validate checks the JSON document doc against the schema.
func (s *schema) validate(doc []byte) []string {
	var v any
	d := json.NewDecoder(strings.NewReader(string(doc)))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return []string{err.Error()}
	}
	var errs []string
	s.check("$", v, s.root, &errs)
	return errs
}

func (s *schema) check(path string, v any, sc map[string]any, errs *[]string) {
	fail := func(f string, a ...any) { *errs = append(*errs, path+": "+fmt.Sprintf(f, a...)) }
	if ref, ok := sc["$ref"].(string); ok {
		name, found := strings.CutPrefix(ref, "#/$defs/")
		def, _ := s.root["$defs"].(map[string]any)[name].(map[string]any)
		if !found || def == nil {
			fail("unknown $ref %s", ref)
			return
		}
		s.check(path, v, def, errs)
		return
	}
	if c, ok := sc["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		fail("want %v, got %v", c, v)
	}
	if e, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }) {
		fail("%v is not one of %v", v, e)
	}
	switch sc["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			fail("want an object, got %T", v)
			return
		}
		props, _ := sc["properties"].(map[string]any)
		req, _ := sc["required"].([]any)
		for _, r := range req {
			if _, ok := m[r.(string)]; !ok {
				fail("missing required %q", r)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := props[k].(map[string]any); ok {
				s.check(path+"."+k, m[k], p, errs)
				continue
			}
			switch ap := sc["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("unknown property %q", k)
				}
			case map[string]any:
				s.check(path+"."+k, m[k], ap, errs)
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			fail("want an array, got %T", v)
			return
		}
		if it, ok := sc["items"].(map[string]any); ok {
			for i, x := range l {
				s.check(fmt.Sprintf("%s[%d]", path, i), x, it, errs)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			fail("want a string, got %T", v)
			return
		}
		if n, ok := sc["maxLength"].(float64); ok && len(str) > int(n) {
			fail("longer than %v", n)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			fail("want a boolean, got %T", v)
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			fail("want an integer, got %T", v)
			return
		}
		i, err := n.Int64()
		if err != nil {
			fail("want an integer, got %s", n)
			return
		}
		if m, ok := sc["minimum"].(float64); ok && float64(i) < m {
			fail("%d < minimum %v", i, m)
		}
		if m, ok := sc["maximum"].(float64); ok && float64(i) > m {
			fail("%d > maximum %v", i, m)
		}
	}
}

// TestSchemaRejects shows the validator can fail: documents that break the
// schema in different ways are refused.
func TestSchemaRejects(t *testing.T) {
	s := loadSchema(t)
	good, err := json.Marshal(planner.Plan{Complete: true, Memory: planner.Memory{Version: planner.MemoryVersion}})
	if err != nil {
		t.Fatal(err)
	}
	if errs := s.validate(good); len(errs) > 0 {
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
	} {
		if errs := s.validate([]byte(doc)); len(errs) == 0 {
			t.Errorf("%s: validated, want an error:\n%s", name, doc)
		}
	}
}
