package plannertest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Schema validates JSON documents against docs/plan.schema.json. It knows
// the subset of JSON Schema (2020-12) that schema uses: type, const, enum,
// properties, required, additionalProperties, items, minimum, maximum,
// maxLength, maxItems, pattern and local $ref. The planner's tests check every scripted plan
// with it, and the end-to-end tests what `enid plan -o json` prints.
type Schema struct {
	root map[string]any
}

// NewSchema parses a schema document (docs/plan.schema.json).
func NewSchema(b []byte) (*Schema, error) {
	var root map[string]any
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, fmt.Errorf("parse schema: %w", err)
	}
	return &Schema{root: root}, nil
}

// Validate checks the JSON document doc against the schema and returns
// one line per violation (none: valid).
func (s *Schema) Validate(doc []byte) []string {
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

// check validates v, at path in the document, against the schema sc,
// appending one line per violation to errs.
func (s *Schema) check(path string, v any, sc map[string]any, errs *[]string) {
	if ref, ok := sc["$ref"].(string); ok {
		name, found := strings.CutPrefix(ref, "#/$defs/")
		def, _ := s.root["$defs"].(map[string]any)[name].(map[string]any)
		if !found || def == nil {
			violation(errs, path, "unknown $ref %s", ref)
			return
		}
		s.check(path, v, def, errs)
		return
	}
	if c, ok := sc["const"]; ok && fmt.Sprint(c) != fmt.Sprint(v) {
		violation(errs, path, "want %v, got %v", c, v)
	}
	if e, ok := sc["enum"].([]any); ok && !slices.ContainsFunc(e, func(x any) bool { return fmt.Sprint(x) == fmt.Sprint(v) }) {
		violation(errs, path, "%v is not one of %v", v, e)
	}
	switch sc["type"] {
	case "object":
		s.checkObject(path, v, sc, errs)
	case "array":
		s.checkArray(path, v, sc, errs)
	case "string":
		checkString(path, v, sc, errs)
	case "boolean":
		if _, ok := v.(bool); !ok {
			violation(errs, path, "want a boolean, got %T", v)
		}
	case "integer":
		checkInteger(path, v, sc, errs)
	}
}

// violation appends the violation at path to errs.
func violation(errs *[]string, path, f string, a ...any) {
	*errs = append(*errs, path+": "+fmt.Sprintf(f, a...))
}

// checkObject checks an object: its required properties, then each
// property by key order against its own schema or additionalProperties.
func (s *Schema) checkObject(path string, v any, sc map[string]any, errs *[]string) {
	m, ok := v.(map[string]any)
	if !ok {
		violation(errs, path, "want an object, got %T", v)
		return
	}
	props, _ := sc["properties"].(map[string]any)
	req, _ := sc["required"].([]any)
	for _, r := range req {
		if _, ok := m[r.(string)]; !ok {
			violation(errs, path, "missing required %q", r)
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
				violation(errs, path, "unknown property %q", k)
			}
		case map[string]any:
			s.check(path+"."+k, m[k], ap, errs)
		}
	}
}

// checkArray checks an array: maxItems, then each item against items.
func (s *Schema) checkArray(path string, v any, sc map[string]any, errs *[]string) {
	l, ok := v.([]any)
	if !ok {
		violation(errs, path, "want an array, got %T", v)
		return
	}
	if n, ok := sc["maxItems"].(float64); ok && len(l) > int(n) {
		violation(errs, path, "more than %v items", n)
	}
	if it, ok := sc["items"].(map[string]any); ok {
		for i, x := range l {
			s.check(fmt.Sprintf("%s[%d]", path, i), x, it, errs)
		}
	}
}

// checkString checks a string: maxLength and pattern.
func checkString(path string, v any, sc map[string]any, errs *[]string) {
	str, ok := v.(string)
	if !ok {
		violation(errs, path, "want a string, got %T", v)
		return
	}
	if n, ok := sc["maxLength"].(float64); ok && len(str) > int(n) {
		violation(errs, path, "longer than %v", n)
	}
	if p, ok := sc["pattern"].(string); ok {
		if re, err := regexp.Compile(p); err != nil {
			violation(errs, path, "bad pattern %q: %v", p, err)
		} else if !re.MatchString(str) {
			violation(errs, path, "%q does not match %s", str, p)
		}
	}
}

// checkInteger checks an integer (a JSON number without a fraction):
// minimum and maximum.
func checkInteger(path string, v any, sc map[string]any, errs *[]string) {
	n, ok := v.(json.Number)
	if !ok {
		violation(errs, path, "want an integer, got %T", v)
		return
	}
	i, err := n.Int64()
	if err != nil {
		violation(errs, path, "want an integer, got %s", n)
		return
	}
	if m, ok := sc["minimum"].(float64); ok && float64(i) < m {
		violation(errs, path, "%d < minimum %v", i, m)
	}
	if m, ok := sc["maximum"].(float64); ok && float64(i) > m {
		violation(errs, path, "%d > maximum %v", i, m)
	}
}

// ReasonCodes returns the schema's reasonCode enum ($defs.reasonCode),
// sorted: every reason code a plan or a status may carry.
func (s *Schema) ReasonCodes() []string {
	defs, _ := s.root["$defs"].(map[string]any)
	rc, _ := defs["reasonCode"].(map[string]any)
	enum, _ := rc["enum"].([]any)
	var out []string
	for _, v := range enum {
		if c, ok := v.(string); ok {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}
