package ecssim_test

import (
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/enidnet/enid/cloud/ecssim"
)

// signedParams returns a complete, signed DescribeInstances request with a
// nonce of its own.
func signedParams(method, secret string) url.Values {
	p := url.Values{}
	p.Set("SignatureNonce", rand.Text())
	for k, v := range map[string]string{
		"Action": "DescribeInstances", "Version": ecssim.ECSVersion, "Format": "JSON", "RegionId": "cn-hangzhou",
		"AccessKeyId": ecssim.DefaultAccessKeyID, "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0",
		"SignatureType": "", "Timestamp": "2026-01-01T00:00:00Z",
		"InstanceIds": `["i-1", "i 2*~"]`,
	} {
		p.Set(k, v)
	}
	p.Set("Signature", ecssim.Sign(method, p, secret))
	return p
}

// errorBody is the error JSON; every field must be a string for the SDK.
type errorBody struct {
	RequestId, HostId, Code, Message, Recommend string
}

func send(t *testing.T, req *http.Request) (int, errorBody) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var eb errorBody
	if err := json.Unmarshal(b, &eb); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return resp.StatusCode, eb
}

func TestSignatureVerification(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	base := "http://" + e.host + "/"
	get := func(p url.Values) *http.Request {
		r, _ := http.NewRequest("GET", base+"?"+p.Encode(), nil) // the URL is well formed
		return r
	}
	post := func(q, form url.Values) *http.Request {
		r, _ := http.NewRequest("POST", base+"?"+q.Encode(), strings.NewReader(form.Encode())) // well formed
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}

	tampered := signedParams("POST", ecssim.DefaultAccessKeySecret)
	tampered.Set("InstanceIds", `["i-1"]`)
	wrongMethod := signedParams("GET", ecssim.DefaultAccessKeySecret)
	unknown := signedParams("GET", "x")
	unknown.Set("AccessKeyId", "nobody")
	// Parameters split between the query and a form body are signed together.
	split := signedParams("POST", ecssim.DefaultAccessKeySecret)
	form := url.Values{"InstanceIds": split["InstanceIds"]}
	split.Del("InstanceIds")
	replayed := signedParams("GET", ecssim.DefaultAccessKeySecret)

	for _, tc := range []struct {
		name   string
		req    *http.Request
		status int
		code   string
	}{
		{"get", get(signedParams("GET", ecssim.DefaultAccessKeySecret)), 200, ""},
		{"post query", post(signedParams("POST", ecssim.DefaultAccessKeySecret), nil), 200, ""},
		{"post query and form", post(split, form), 200, ""},
		{"tampered parameter", post(tampered, nil), 400, "SignatureDoesNotMatch"},
		{"signed for another method", post(wrongMethod, nil), 400, "SignatureDoesNotMatch"},
		{"wrong secret", get(signedParams("GET", "not-the-secret")), 400, "SignatureDoesNotMatch"},
		{"unknown key", get(unknown), 404, "InvalidAccessKeyId.NotFound"},
		{"first use of a nonce", get(replayed), 200, ""},
		{"replayed request", get(replayed), 400, "SignatureNonceUsed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := send(t, tc.req)
			if status != tc.status || body.Code != tc.code {
				t.Fatalf("got %d %q (%s), want %d %q", status, body.Code, body.Message, tc.status, tc.code)
			}
			if body.RequestId == "" {
				t.Error("no RequestId")
			}
			if tc.code != "" && (body.HostId == "" || body.Message == "") {
				t.Errorf("error body lacks HostId or Message: %+v", body)
			}
		})
	}

	// Through the SDK: a wrong secret and an unknown key.
	bad := ecsClient(t, e.host, ecssim.DefaultAccessKeyID, "wrong")
	_, err := bad.DescribeInstances(ecsDescribeInstances())
	if got := code(t, err); got != "SignatureDoesNotMatch" {
		t.Errorf("SDK with wrong secret: %v", err)
	}
	bad = ecsClient(t, e.host, "nobody", "x")
	_, err = bad.DescribeInstances(ecsDescribeInstances())
	if got := code(t, err); got != "InvalidAccessKeyId.NotFound" {
		t.Errorf("SDK with unknown key: %v", err)
	}
	c := e.sim.Counters()["DescribeInstances"]
	if c["SignatureDoesNotMatch"] != 4 || c["InvalidAccessKeyId.NotFound"] != 2 || c["ok"] != 4 || c["SignatureNonceUsed"] != 1 {
		t.Errorf("counters: %v", c)
	}
}
