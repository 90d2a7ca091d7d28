package ecssim

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"net/url"
	"sort"
	"strings"
)

// percentEncode encodes s as RFC 3986 requires for signature v1: every
// byte but A-Z a-z 0-9 - _ . ~ becomes %XX with upper-case hex.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// stringToSign builds the signature v1 string to sign from the request
// method and its decoded parameters (Signature excluded). A parameter given
// more than once is signed with its first value, as it is read.
func stringToSign(method string, params url.Values) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		if k == "Signature" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, percentEncode(k)+"="+percentEncode(params.Get(k)))
	}
	return method + "&" + percentEncode("/") + "&" + percentEncode(strings.Join(parts, "&"))
}

// Sign returns the signature v1 of a request with these parameters: the
// base64 HMAC-SHA1 of its string to sign under secret+"&". It is exported
// so that tests and tools can build requests by hand.
func Sign(method string, params url.Values, secret string) string {
	mac := hmac.New(sha1.New, []byte(secret+"&"))
	mac.Write([]byte(stringToSign(method, params)))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signatureOK reports whether sig is the signature of the request.
func signatureOK(method string, params url.Values, secret, sig string) bool {
	want := Sign(method, params, secret)
	return hmac.Equal([]byte(want), []byte(sig))
}
