package desired

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a config or an entry: where it is and what
// is wrong with it. Messages carry the offending value (never a secret).
type Problem struct {
	// File is the file the offending value came from; empty when the value
	// is a default or the document had no file (ParseConfig).
	File string
	// Path is the field path, e.g. "pool.maxIdle" or "eni.vSwitches[cn-hangzhou-k]".
	Path string
	// Message says what is wrong and, where it helps, how to fix it.
	Message string
}

// String renders the problem as "file: path: message".
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// strictDecoder decodes a generic JSON value (from encoding/json with
// UseNumber) into a Go value field by field. Unlike encoding/json it matches
// keys exactly (case included), reports every unknown key and every bad value
// with its full path instead of stopping at the first, and so gives the
// "misspelled key is an error naming it" behaviour the config promises.
type strictDecoder struct {
	problems []Problem
	// secret is set while decoding a field tagged secret: its value is
	// never quoted in a problem.
	secret bool
}

func (d *strictDecoder) add(path, format string, args ...any) {
	d.problems = append(d.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

var jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// decode sets v (addressable) from src. A nil src (JSON null) leaves v as is.
func (d *strictDecoder) decode(path string, src any, v reflect.Value) {
	if src == nil {
		return
	}
	t := v.Type()
	if isLeaf(t) {
		d.leaf(path, src, v)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.decode(path, src, v.Elem())
	case reflect.Struct:
		obj, ok := src.(map[string]any)
		if !ok {
			d.add(path, "must be a mapping (got %s)", describe(src))
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			i, ok := fields[k]
			if !ok {
				d.add(joinPath(path, k), "unknown field%s", suggest(k, fields))
				continue
			}
			was := d.secret
			d.secret = d.secret || isSecret(t.Field(i))
			d.decode(joinPath(path, k), obj[k], v.Field(i))
			d.secret = was
		}
	case reflect.Map:
		obj, ok := src.(map[string]any)
		if !ok {
			d.add(path, "must be a mapping (got %s)", describe(src))
			return
		}
		m := reflect.MakeMapWithSize(t, len(obj))
		for _, k := range sortedKeys(obj) {
			e := reflect.New(t.Elem()).Elem()
			d.decode(fmt.Sprintf("%s[%s]", path, k), obj[k], e)
			m.SetMapIndex(reflect.ValueOf(k).Convert(t.Key()), e)
		}
		v.Set(m)
	case reflect.Slice:
		list, ok := src.([]any)
		if !ok {
			d.add(path, "must be a list (got %s)", describe(src))
			return
		}
		s := reflect.MakeSlice(t, len(list), len(list))
		for i, e := range list {
			d.decode(fmt.Sprintf("%s[%d]", path, i), e, s.Index(i))
		}
		v.Set(s)
	}
}

// leaf decodes a value that has no fields of its own through encoding/json,
// turning its error into a problem at path.
func (d *strictDecoder) leaf(path string, src any, v reflect.Value) {
	if setScalar(src, v) {
		return
	}
	raw, err := json.Marshal(src)
	if err != nil {
		d.add(path, "cannot encode value: %v", err)
		return
	}
	n := reflect.New(v.Type())
	if err := json.Unmarshal(raw, n.Interface()); err != nil {
		got := describe(src)
		if d.secret {
			got = Redacted
		}
		d.add(path, "%s (got %s)", leafMessage(err, v.Type()), got)
		return
	}
	v.Set(n.Elem())
}

// setScalar sets plain strings, integers, floats and booleans without a
// round trip through encoding/json (entries are read on every agent pass).
// It reports false when it did not set v; the slow path then decodes it or
// words the error.
func setScalar(src any, v reflect.Value) bool {
	if reflect.PointerTo(v.Type()).Implements(jsonUnmarshalerType) {
		return false
	}
	switch x := src.(type) {
	case string:
		if v.Kind() == reflect.String {
			v.SetString(x)
			return true
		}
	case bool:
		if v.Kind() == reflect.Bool {
			v.SetBool(x)
			return true
		}
	case json.Number:
		switch v.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n, err := strconv.ParseInt(x.String(), 10, 64)
			if err != nil || v.OverflowInt(n) {
				return false
			}
			v.SetInt(n)
			return true
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n, err := strconv.ParseUint(x.String(), 10, 64)
			if err != nil || v.OverflowUint(n) {
				return false
			}
			v.SetUint(n)
			return true
		}
	}
	return false
}

func leafMessage(err error, t reflect.Type) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "must be " + typeName(t)
	}
	// A type's own UnmarshalJSON (Duration) words its errors for people;
	// other errors are encoding/json's.
	return strings.TrimPrefix(err.Error(), "json: ")
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "a " + t.String()
}

// describe renders a decoded JSON value briefly, for "(got ...)".
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 64 {
			x = x[:64] + "..."
		}
		return fmt.Sprintf("%q", x)
	case json.Number:
		return x.String()
	case bool:
		return fmt.Sprint(x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("%T", v)
}

// isLeaf reports whether t is decoded whole by encoding/json: it decodes
// itself, or it is a scalar. Structs, maps and lists are walked so that a
// problem names the exact key or index.
func isLeaf(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(jsonUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice:
		return false
	case reflect.Pointer:
		return isLeaf(t.Elem())
	}
	return true
}

// jsonFields maps JSON names to field indexes; fields tagged "-" are not
// settable from a document.
func jsonFields(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = i
	}
	return m
}

// suggest proposes the known key closest to a misspelled one.
func suggest(k string, fields map[string]int) string {
	best, bestD := "", 3
	for name := range fields {
		if dist := editDistance(strings.ToLower(k), strings.ToLower(name)); dist < bestD || dist == bestD && name < best && best != "" {
			best, bestD = name, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// decodeGeneric parses one JSON document into generic values with numbers
// kept exact, rejecting duplicate keys (encoding/json silently keeps the last
// one, which would let a second "containerID" hide behind the first) and
// trailing data.
func decodeGeneric(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not valid JSON: data after the end of the document")
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("not valid JSON: data after the end of the document")
	}
	if err := checkDuplicateKeys(data); err != nil {
		return nil, err
	}
	return v, nil
}

// checkDuplicateKeys walks the token stream and fails on an object that
// names one key twice.
func checkDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(path string) error
	walk = func(path string) error {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not valid JSON: %w", err)
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return fmt.Errorf("not valid JSON: %w", err)
				}
				k, _ := kt.(string) // object keys are always strings
				if seen[k] {
					return fmt.Errorf("%s: duplicate key", joinPath(path, k))
				}
				seen[k] = true
				if err := walk(joinPath(path, k)); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("not valid JSON: %w", err)
			}
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("not valid JSON: %w", err)
			}
		}
		return nil
	}
	return walk("")
}
