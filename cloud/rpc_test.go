package cloud

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
)

// faultServer is a bare RPC endpoint for the client's own tests: it
// answers every action through answer, which sees the action and how many
// times that action was called before. Contract tests against the real
// simulator live in contract_test.go.
type faultServer struct {
	*httptest.Server
	answer func(action string, n int) (status int, body string)

	mu    sync.Mutex
	calls map[string]int
	log   []string // "Action" per request, in order
}

func newFaultServer(t *testing.T, answer func(action string, n int) (int, string)) *faultServer {
	t.Helper()
	s := &faultServer{answer: answer, calls: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		action := r.Form.Get("Action")
		s.mu.Lock()
		n := s.calls[action]
		s.calls[action]++
		s.log = append(s.log, action)
		s.mu.Unlock()
		status, body := s.answer(action, n)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *faultServer) count(action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[action]
}

// endpoint is the server's host:port.
func (s *faultServer) endpoint() string { return strings.TrimPrefix(s.URL, "http://") }

func errBody(code string) string {
	b, _ := json.Marshal(map[string]string{"RequestId": "req-" + code, "Code": code, "Message": "message of " + code, "HostId": "h"})
	return string(b)
}

const okDelete = `{"RequestId":"req-ok"}`

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu    sync.Mutex
	calls []string // "Action outcome"
}

func (r *recorder) ObserveCall(action, outcome string, _ time.Time, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, action+" "+outcome)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func testCreds() credentials.CredentialsProvider {
	return credentials.NewStaticAKCredentialsProvider("testid", "testsecret")
}

// fastConfig is a client config with small delays, for endpoint.
func fastConfig(endpoint string) Config {
	return Config{
		Endpoint:    endpoint,
		Region:      "cn-hangzhou",
		Credentials: testCreds(),
		Retry:       RetryPolicy{MaxAttempts: 4, BaseDelay: 2 * time.Millisecond, MaxDelay: 10 * time.Millisecond, Budget: 5 * time.Second},
		CallTimeout: 2 * time.Second,
		Wait:        WaitPolicy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Timeout: 10 * time.Second},
	}
}

func newTestClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
