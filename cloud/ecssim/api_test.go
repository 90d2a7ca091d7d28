package ecssim

import (
	"slices"
	"testing"
	"time"
)

// TestNonceForgottenAfterWindow checks that a SignatureNonce is refused
// within nonceWindow and accepted again after it, and that the uses older
// than the window are forgotten as calls come.
func TestNonceForgottenAfterWindow(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Config{Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	use := func(nonce, want string) {
		t.Helper()
		got := "ok"
		if e := s.useNonce(nonce, "k", now); e != nil {
			got = e.Code
		}
		if got != want {
			t.Fatalf("nonce %s at %s: %s, want %s", nonce, now.Format(time.TimeOnly), got, want)
		}
	}
	remembered := func(want ...string) {
		t.Helper()
		var got []string
		for _, u := range s.nonceQ {
			got = append(got, u.key[len("k\x00"):])
		}
		if !slices.Equal(got, want) || len(s.nonces) != len(want) {
			t.Fatalf("remembered %v (%d in the map), want %v", got, len(s.nonces), want)
		}
	}
	use("a", "ok")
	use("b", "ok")
	use("c", "ok")
	now = now.Add(nonceWindow - time.Second)
	use("a", "SignatureNonceUsed")
	use("d", "ok")
	remembered("a", "b", "c", "d")
	now = now.Add(time.Second)
	use("a", "ok")
	remembered("d", "a")
	now = now.Add(nonceWindow)
	use("e", "ok")
	remembered("e")
}
