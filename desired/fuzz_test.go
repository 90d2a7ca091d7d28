package desired

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParseConfig: any input either loads into a config that validates and
// survives a String round trip, or fails with a *ConfigError that has at
// least one problem. Seeds: testdata/fuzz/FuzzParseConfig.
func FuzzParseConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data, NodeFacts{NodeName: "n1", Zone: "cn-hangzhou-k", InstanceType: "ecs.g7.large"})
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("error is not a *ConfigError with problems: %v", err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("loaded config does not validate: %v", err)
		}
		again, err := ParseConfig([]byte(cfg.String()), NodeFacts{NodeName: "n1", Zone: "cn-hangzhou-k", InstanceType: "ecs.g7.large"})
		if err != nil {
			t.Fatalf("String() does not parse back: %v\n%s", err, cfg)
		}
		if diff := cmp.Diff(cfg, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}

// FuzzParseEntry: any input either parses into an entry that validates and
// survives a JSON round trip, or fails wrapping ErrInvalidEntry. Seeds:
// testdata/fuzz/FuzzParseEntry.
func FuzzParseEntry(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParseEntry(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("error does not wrap ErrInvalidEntry: %v", err)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("parsed entry does not validate: %v", err)
		}
		if e.Revision != Revision(data) {
			t.Fatalf("revision %q, want %q", e.Revision, Revision(data))
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseEntry(out)
		if err != nil {
			t.Fatalf("re-encoded entry does not parse: %v\n%s", err, out)
		}
		again.Revision = e.Revision
		if diff := cmp.Diff(e, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
	})
}
