package ecssim

import (
	"net/url"
	"testing"
)

// TestSignKnownAnswer checks the signer against Alibaba Cloud's published
// signature example (GET DescribeRegions, testid/testsecret).
func TestSignKnownAnswer(t *testing.T) {
	p := url.Values{}
	for k, v := range map[string]string{
		"Timestamp":        "2016-02-23T12:46:24Z",
		"Format":           "XML",
		"AccessKeyId":      "testid",
		"Action":           "DescribeRegions",
		"SignatureMethod":  "HMAC-SHA1",
		"SignatureNonce":   "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf",
		"Version":          "2014-05-26",
		"SignatureVersion": "1.0",
	} {
		p.Set(k, v)
	}
	const want = "OLeaidS1JvxuMvnyHOwuJ+uX5qY="
	if got := Sign("GET", p, "testsecret"); got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	if !signatureOK("GET", p, "testsecret", want) {
		t.Fatal("signatureOK rejects the known answer")
	}
	p.Set("Signature", want) // the signature itself is not signed
	if got := Sign("GET", p, "testsecret"); got != want {
		t.Fatalf("Sign with Signature present = %q, want %q", got, want)
	}
	if Sign("POST", p, "testsecret") == want {
		t.Fatal("the method is not part of the signature")
	}
}

func TestPercentEncode(t *testing.T) {
	for in, want := range map[string]string{
		"a b":       "a%20b",
		"a*b":       "a%2Ab",
		"a~b-_.":    "a~b-_.",
		"[\"i-1\"]": "%5B%22i-1%22%5D",
		"é":         "%C3%A9",
		"a+b/c=":    "a%2Bb%2Fc%3D",
	} {
		if got := percentEncode(in); got != want {
			t.Errorf("percentEncode(%q) = %q, want %q", in, got, want)
		}
	}
}
