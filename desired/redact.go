package desired

import (
	"encoding/json"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// Redacted replaces a secret's value wherever a config is printed.
const Redacted = "<redacted>"

// A field tagged `secret:"true"` holds a secret: String and every problem
// message print Redacted instead of its value. Config holds no secret today
// (credentials come from the environment, a file or the RAM role; only the
// file's path is configured); TestSecretFieldsTagged fails when a field that
// looks like a secret is added without the tag.
func isSecret(f reflect.StructField) bool { return f.Tag.Get("secret") == "true" }

// String renders the config as YAML with secrets redacted. It is meant for
// logs and `enid plan`; it parses back to the same config when nothing is
// redacted.
func (c Config) String() string {
	body, err := jsonBody(c)
	if err != nil {
		return "<config: " + err.Error() + ">"
	}
	redactGeneric(body, reflect.TypeFor[Config]())
	out, err := yaml.Marshal(body)
	if err != nil {
		return "<config: " + err.Error() + ">"
	}
	return string(out)
}

// redactGeneric walks a generic JSON value alongside the Go type it encodes
// and blanks every secret field, including inside override bodies.
func redactGeneric(v any, t reflect.Type) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[json.RawMessage]() {
		// An override body is a partial Config.
		return redactGeneric(v, reflect.TypeFor[Config]())
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			val, ok := m[name]
			if !ok {
				continue
			}
			if isSecret(f) {
				m[name] = Redacted
				continue
			}
			m[name] = redactGeneric(val, f.Type)
		}
		return m
	case reflect.Map:
		if m, ok := v.(map[string]any); ok {
			for k, e := range m {
				m[k] = redactGeneric(e, t.Elem())
			}
		}
	case reflect.Slice:
		if l, ok := v.([]any); ok {
			for i, e := range l {
				l[i] = redactGeneric(e, t.Elem())
			}
		}
	}
	return v
}

// jsonBody renders v as a generic JSON value (used by String).
func jsonBody(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}
