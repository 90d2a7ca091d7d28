package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
)

// planSchema validates documents against docs/plan.schema.json with the
// keywords that schema uses (type, const, enum, properties, required,
// additionalProperties, items, minimum, maximum, maxLength, local $ref).
// The planner checks its own output the same way; this one checks what
// the binary prints.
type planSchema struct {
	root map[string]any
}

func loadPlanSchema(t *testing.T) planSchema {
	t.Helper()
	b, err := os.ReadFile("../docs/plan.schema.json")
	if err != nil {
		t.Fatalf("read schema: %v", err)
	}
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("parse schema: %v", err)
	}
	return planSchema{root: root}
}

// validate returns every violation in doc.
func (s planSchema) validate(doc []byte) []string {
	d := json.NewDecoder(strings.NewReader(string(doc)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	var errs []string
	s.walk("$", v, s.root, &errs)
	return errs
}

func (s planSchema) walk(path string, v any, sc map[string]any, errs *[]string) {
	bad := func(format string, args ...any) { *errs = append(*errs, path+": "+fmt.Sprintf(format, args...)) }
	if ref, ok := sc["$ref"].(string); ok {
		defs, _ := s.root["$defs"].(map[string]any)
		def, ok := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		if !ok || !strings.HasPrefix(ref, "#/$defs/") {
			bad("unresolvable $ref %q", ref)
			return
		}
		s.walk(path, v, def, errs)
		return
	}
	same := func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }
	if c, ok := sc["const"]; ok && !same(c) {
		bad("%v, want const %v", v, c)
	}
	if e, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(e, same) {
		bad("%v not in enum %v", v, e)
	}
	switch sc["type"] {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			bad("%T, want an object", v)
			return
		}
		props, _ := sc["properties"].(map[string]any)
		for _, r := range anyList(sc["required"]) {
			if _, ok := m[fmt.Sprint(r)]; !ok {
				bad("required %q missing", r)
			}
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, ok := props[k].(map[string]any); ok {
				s.walk(path+"."+k, m[k], p, errs)
			} else if ap, ok := sc["additionalProperties"].(map[string]any); ok {
				s.walk(path+"."+k, m[k], ap, errs)
			} else if sc["additionalProperties"] == false {
				bad("property %q not allowed", k)
			}
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			bad("%T, want an array", v)
			return
		}
		if it, ok := sc["items"].(map[string]any); ok {
			for i, x := range l {
				s.walk(fmt.Sprintf("%s[%d]", path, i), x, it, errs)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			bad("%T, want a string", v)
		} else if ml, ok := sc["maxLength"].(float64); ok && float64(len(str)) > ml {
			bad("length %d > maxLength %v", len(str), ml)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("%T, want a boolean", v)
		}
	case "integer":
		num, ok := v.(json.Number)
		i, err := num.Int64()
		if !ok || err != nil {
			bad("%v, want an integer", v)
			return
		}
		if lo, ok := sc["minimum"].(float64); ok && float64(i) < lo {
			bad("%d < minimum %v", i, lo)
		}
		if hi, ok := sc["maximum"].(float64); ok && float64(i) > hi {
			bad("%d > maximum %v", i, hi)
		}
	case nil:
	default:
		bad("schema type %v not understood by this validator", sc["type"])
	}
}

func anyList(v any) []any {
	l, _ := v.([]any)
	return l
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
		if errs := s.validate([]byte(doc)); len(errs) == 0 {
			t.Errorf("%s: %s validated", name, doc)
		}
	}
}
