package cloud

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRetryThenSucceed(t *testing.T) {
	script := []struct {
		status int
		body   string
	}{
		{400, errBody("Throttling.User")},
		{500, errBody("InternalError")},
		{503, errBody("ServiceUnavailable")},
		{200, okDelete},
	}
	srv := newFaultServer(t, func(_ string, n int) (int, string) { return script[n].status, script[n].body })
	rec := &recorder{}
	cfg := fastConfig(srv.endpoint())
	cfg.Observer = rec
	c := newTestClient(t, cfg)
	if err := c.DeleteENI(testCtx(t), "eni-1"); err != nil {
		t.Fatalf("DeleteENI: %v", err)
	}
	want := []string{
		"DeleteNetworkInterface Throttling.User",
		"DeleteNetworkInterface InternalError",
		"DeleteNetworkInterface ServiceUnavailable",
		"DeleteNetworkInterface ok",
	}
	if diff := cmp.Diff(want, rec.got()); diff != "" {
		t.Errorf("observed attempts (-want +got):\n%s", diff)
	}
}

func TestRetryGivesUpAfterMaxAttempts(t *testing.T) {
	srv := newFaultServer(t, func(string, int) (int, string) { return 400, errBody("Throttling") })
	c := newTestClient(t, fastConfig(srv.endpoint()))
	err := c.DeleteENI(testCtx(t), "eni-1")
	if !errors.Is(err, ErrThrottled) {
		t.Fatalf("got %v, want ErrThrottled", err)
	}
	if got := srv.count("DeleteNetworkInterface"); got != 4 {
		t.Errorf("%d attempts, want MaxAttempts=4", got)
	}
}

func TestRetryGivesUpWhenBudgetSpent(t *testing.T) {
	srv := newFaultServer(t, func(string, int) (int, string) { return 500, errBody("InternalError") })
	cfg := fastConfig(srv.endpoint())
	cfg.Retry = RetryPolicy{MaxAttempts: 100, BaseDelay: 20 * time.Millisecond, MaxDelay: 20 * time.Millisecond, Budget: 70 * time.Millisecond}
	c := newTestClient(t, cfg)
	start := time.Now()
	err := c.DeleteENI(testCtx(t), "eni-1")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("got %v, want ErrUnavailable after the budget", err)
	}
	// Backoffs are 10..20ms each within a 70ms budget: at most 8 attempts
	// (the budget's bound), and more than one (it retried). An idle machine
	// makes 4 or more; a loaded one spends part of the budget on each
	// attempt's round trip (3 were seen at a load average of 16), which
	// says nothing about the budget.
	if n := srv.count("DeleteNetworkInterface"); n < 2 || n > 8 {
		t.Errorf("%d attempts within a 70ms budget of 10-20ms backoffs", n)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("gave up after %v", el)
	}
}

// A call whose caller retries the whole operation (the agent's full
// observation) is tried once after a service failure, and still retried
// after throttling, which the limiter paces.
func TestCallerRetries(t *testing.T) {
	down := newFaultServer(t, func(string, int) (int, string) { return 503, errBody("ServiceUnavailable") })
	c := newTestClient(t, fastConfig(down.endpoint()))
	if _, err := c.VSwitches(WithCallerRetries(testCtx(t)), []string{"vsw-1"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if n := down.count("DescribeVSwitches"); n != 1 {
		t.Errorf("caller retries, service down: %d attempts, want 1", n)
	}
	if _, err := c.VSwitches(testCtx(t), []string{"vsw-1"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	if n := down.count("DescribeVSwitches"); n != 1+4 {
		t.Errorf("without caller retries: %d attempts after the first, want MaxAttempts=4", n-1)
	}

	throttled := newFaultServer(t, func(_ string, n int) (int, string) {
		if n < 2 {
			return 400, errBody("Throttling.User")
		}
		return 200, `{"RequestId":"r","VSwitches":{"VSwitch":[]},"TotalCount":0,"PageNumber":1,"PageSize":50}`
	})
	c = newTestClient(t, fastConfig(throttled.endpoint()))
	// The answer names no vSwitch: the client says so (ErrNotFound),
	// which is an answer, not a failure of the service.
	if _, err := c.VSwitches(WithCallerRetries(testCtx(t)), []string{"vsw-1"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("throttled twice, then answered: %v, want the answer's ErrNotFound", err)
	}
	if n := throttled.count("DescribeVSwitches"); n != 3 {
		t.Errorf("caller retries, throttled twice: %d attempts, want 3", n)
	}
}

func TestNoRetryOnNonRetryable(t *testing.T) {
	for _, code := range []string{"InvalidOperation.InvalidEniState", "IdempotentParameterMismatch", "InvalidVSwitchId.IpNotEnough", "SignatureDoesNotMatch", "InvalidParameter"} {
		srv := newFaultServer(t, func(string, int) (int, string) { return 400, errBody(code) })
		c := newTestClient(t, fastConfig(srv.endpoint()))
		_, err := c.CreateENI(testCtx(t), CreateENIRequest{VSwitchID: "vsw-1", SecurityGroups: []string{"sg-1"}})
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != code {
			t.Errorf("%s: got %v", code, err)
		}
		if n := srv.count("CreateNetworkInterface"); n != 1 {
			t.Errorf("%s: %d attempts, want 1", code, n)
		}
	}
}

func TestTransportErrorsAreRetried(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	ep := strings.TrimPrefix(srv.URL, "http://")
	srv.Close() // nothing listens there now
	rec := &recorder{}
	cfg := fastConfig(ep)
	cfg.Observer = rec
	c := newTestClient(t, cfg)
	err := c.DetachENI(testCtx(t), "eni-1", "i-1")
	if !errors.Is(err, ErrUnavailable) || !Retryable(err) {
		t.Fatalf("got %v, want a retryable ErrUnavailable", err)
	}
	want := strings.Repeat("DetachNetworkInterface "+CodeTransport+",", 4)
	if got := strings.Join(rec.got(), ",") + ","; got != want {
		t.Errorf("attempts %q, want %q", got, want)
	}
}

func TestCallTimeout(t *testing.T) {
	srv := newFaultServer(t, func(string, int) (int, string) {
		time.Sleep(300 * time.Millisecond)
		return 200, okDelete
	})
	cfg := fastConfig(srv.endpoint())
	cfg.CallTimeout = 30 * time.Millisecond
	cfg.Retry.MaxAttempts = 2
	c := newTestClient(t, cfg)
	start := time.Now()
	err := c.DeleteENI(testCtx(t), "eni-1")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable (timed out)", err)
	}
	if el := time.Since(start); el > 250*time.Millisecond {
		t.Errorf("2 attempts of 30ms took %v", el)
	}
}

func TestContextCancelStopsCallAndRetries(t *testing.T) {
	srv := newFaultServer(t, func(string, int) (int, string) {
		time.Sleep(200 * time.Millisecond)
		return 500, errBody("InternalError")
	})
	c := newTestClient(t, fastConfig(srv.endpoint()))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.DeleteENI(ctx, "eni-1")
	if !errors.Is(err, context.DeadlineExceeded) || Retryable(err) {
		t.Fatalf("got %v, want the context's deadline, not retryable", err)
	}
	if el := time.Since(start); el > 180*time.Millisecond {
		t.Errorf("returned after %v, want soon after the 50ms deadline", el)
	}
	if n := srv.count("DeleteNetworkInterface"); n != 1 {
		t.Errorf("%d attempts after the deadline, want 1", n)
	}
}

// TestIgnoresProxyEnvironment proves calls go straight to the endpoint even
// when HTTP_PROXY names a proxy (the SDK reads it itself).
func TestIgnoresProxyEnvironment(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:9")
	t.Setenv("http_proxy", "http://127.0.0.1:9")
	srv := newFaultServer(t, func(string, int) (int, string) { return 200, okDelete })
	cfg := fastConfig(srv.endpoint())
	cfg.Retry.MaxAttempts = 1
	c := newTestClient(t, cfg)
	if err := c.DeleteENI(testCtx(t), "eni-1"); err != nil {
		t.Fatalf("DeleteENI with HTTP_PROXY set: %v", err)
	}
}

func TestBackoffBounds(t *testing.T) {
	c := newTestClient(t, Config{Region: "r", Credentials: testCreds(), Endpoint: "127.0.0.1:1",
		Retry: RetryPolicy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}})
	for n, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		for range 50 {
			if d := c.backoff(n); d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, want/2, want)
			}
		}
	}
}

// TestUnassignFallsBackToSingles: when a call of several addresses fails
// because one is already gone, the others are still unassigned one by one.
func TestUnassignFallsBackToSingles(t *testing.T) {
	srv := newFaultServer(t, func(_ string, n int) (int, string) {
		if n == 0 || n == 2 {
			return 403, errBody("InvalidIp.IpUnassigned")
		}
		return 200, okDelete
	})
	c := newTestClient(t, fastConfig(srv.endpoint()))
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")}
	if err := c.UnassignIPv4(testCtx(t), "eni-1", ips); err != nil {
		t.Fatalf("UnassignIPv4: %v", err)
	}
	if n := srv.count("UnassignPrivateIpAddresses"); n != 4 {
		t.Errorf("%d calls, want 1 for the batch and 3 singles", n)
	}
}

// TestUntokenedCreateNotRepeated: a create without a ClientToken is
// retried after throttling (refused before any effect) but not after a 5xx
// (it may have made the ENI); with a token it is.
func TestUntokenedCreateNotRepeated(t *testing.T) {
	const created = `{"RequestId":"r","NetworkInterfaceId":"eni-new","Status":"Available","PrivateIpAddress":"10.0.0.5"}`
	for _, tt := range []struct {
		name, token, code string
		status, calls     int
		ok                bool
	}{
		{"throttled, no token", "", "Throttling", 400, 2, true},
		{"5xx, no token", "", "InternalError", 500, 1, false},
		{"5xx, token", ClientToken("x"), "InternalError", 500, 2, true},
	} {
		srv := newFaultServer(t, func(_ string, n int) (int, string) {
			if n == 0 {
				return tt.status, errBody(tt.code)
			}
			return 200, created
		})
		c := newTestClient(t, fastConfig(srv.endpoint()))
		_, err := c.CreateENI(testCtx(t), CreateENIRequest{VSwitchID: "vsw-1", SecurityGroups: []string{"sg-1"}, ClientToken: tt.token})
		if (err == nil) != tt.ok {
			t.Errorf("%s: err %v, want ok=%v", tt.name, err, tt.ok)
		}
		if n := srv.count("CreateNetworkInterface"); n != tt.calls {
			t.Errorf("%s: %d calls, want %d", tt.name, n, tt.calls)
		}
	}
}

// TestCancelDuringBackoff: a context that ends while the client waits to
// retry ends the call with both errors, and it is not retryable.
func TestCancelDuringBackoff(t *testing.T) {
	srv := newFaultServer(t, func(string, int) (int, string) { return 503, errBody("ServiceUnavailable") })
	cfg := fastConfig(srv.endpoint())
	cfg.Retry.BaseDelay, cfg.Retry.MaxDelay = time.Second, time.Second
	c := newTestClient(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := c.DeleteENI(ctx, "eni-1")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || Retryable(err) {
		t.Errorf("got %v (retryable %v), want ErrUnavailable and the deadline, not retryable", err, Retryable(err))
	}
	if n := srv.count("DeleteNetworkInterface"); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}
