package planner_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// reasonCodes returns the value of every ReasonCode constant the planner
// declares, read from its source so that a new code cannot be missed.
func reasonCodes(t *testing.T) []string {
	t.Helper()
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, f := range pkgs["planner"].Files {
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "ReasonCode" {
				return true
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Fatalf("ReasonCode constant %v is not a string literal", vs.Names)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				codes = append(codes, s)
			}
			return true
		})
	}
	if len(codes) < 10 {
		t.Fatalf("found only %d reason codes in the planner's source: %v", len(codes), codes)
	}
	slices.Sort(codes)
	return codes
}

// TestReasonCodesDocumented holds the docs to the code: the schema's
// reasonCode enum is exactly the planner's codes, and every code the docs
// name as a status's reason exists.
func TestReasonCodesDocumented(t *testing.T) {
	codes := reasonCodes(t)
	enum := loadSchema(t).ReasonCodes()
	if !slices.Equal(enum, codes) {
		t.Errorf("docs/plan.schema.json's reasonCode enum differs from the planner's ReasonCode constants:\nschema  %v\nplanner %v", enum, codes)
	}

	// The rows that speak of reason codes: the status table of plan.md and
	// the reasonCode row of status-files.md.
	code := regexp.MustCompile("`([a-z]+(?:-[a-z0-9]+)*)`")
	for _, doc := range []struct{ file, start, end string }{
		{"../docs/plan.md", "| phase | reasonCode | when |", "\n\n"},
		{"../docs/status-files.md", "| `reason`, `reasonCode` |", "\n"},
	} {
		b, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		_, part, ok := strings.Cut(string(b), doc.start)
		if !ok {
			t.Fatalf("%s: no %q", doc.file, doc.start)
		}
		part, _, _ = strings.Cut(part, doc.end)
		found := 0
		for _, m := range code.FindAllStringSubmatch(part, -1) {
			if !strings.Contains(m[1], "-") && m[1] != "ready" {
				continue // a word like `maxENIs`, not a code
			}
			found++
			if !slices.Contains(codes, m[1]) {
				t.Errorf("%s names reason code %q, which the planner does not have", doc.file, m[1])
			}
		}
		if found == 0 {
			t.Errorf("%s: no reason code found after %q", doc.file, doc.start)
		}
	}
}

// TestDocMapNamesRealFiles: every file the package doc's "Where to look"
// names exists, so the map cannot drift from the tree.
func TestDocMapNamesRealFiles(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`[a-z_/]+\.(go|txt)`).FindAllString(string(b), -1)
	if len(names) < 10 {
		t.Fatalf("the doc names %d files: the map is gone", len(names))
	}
	for _, n := range slices.Compact(slices.Sorted(slices.Values(names))) {
		if _, err := os.Stat(n); err != nil {
			t.Errorf("doc.go names %s: %v", n, err)
		}
	}
}
