package cloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/requests"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/responses"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"

	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/observed"
)

// Config configures a Client. Zero durations and counts take the defaults
// named on each field.
type Config struct {
	// Endpoint overrides the ECS and VPC endpoint. "host:port" (as the
	// simulator gives it) is spoken in plain HTTP; "https://host[:port]" in
	// HTTPS. "" uses the SDK's regional endpoints over HTTPS.
	Endpoint string
	// Region is the region ID (required).
	Region string
	// Credentials sign every call (required). CredentialsFrom builds one
	// from the agent config; any SDK provider works.
	Credentials credentials.CredentialsProvider
	// RateLimit bounds the calls this client makes: QPS/Burst for all calls
	// together and PerAction for single actions. A QPS <= 0 means no limit.
	// Within it the client learns the rate the account affords (see
	// limiter).
	RateLimit RateLimit
	// Retry bounds how retryable failures are retried.
	Retry RetryPolicy
	// CallTimeout bounds one attempt of one call (default 10s).
	CallTimeout time.Duration
	// Wait paces WaitENI and WaitENIGone.
	Wait WaitPolicy
	// PageSize is MaxResults for paginated describes (default 100, kept
	// within the 10..500 ECS accepts).
	PageSize int
	// Observer, when not nil, is told about every attempt.
	Observer Observer
	// Logger receives retry and wait messages (default: discard).
	Logger *slog.Logger
	// Transport carries the HTTP requests (default: a transport that never
	// uses a proxy, whatever HTTP_PROXY says). The SDK does not touch a
	// transport given here.
	Transport http.RoundTripper
	// Clock times rate limits, backoff, waits and call timeouts (default:
	// clock.Real). The agent gives its own, so that one clock runs it all.
	Clock clock.Clock
	// Rand draws the jitter of the backoffs, after throttling and between
	// retries (default: a source seeded at random). Tests and the
	// deterministic simulation give a seeded one.
	Rand *rand.Rand
}

// RetryPolicy bounds retries of retryable failures (see Retryable). The
// n-th retry waits a random time in [d/2, d] with d = min(BaseDelay*2^(n-1),
// MaxDelay) ("equal jitter", so a throttled fleet spreads out but never
// hammers at once).
type RetryPolicy struct {
	// MaxAttempts is the most attempts per call, the first included
	// (default 5; 1 disables retries).
	MaxAttempts int
	// BaseDelay is the first backoff (default 200ms).
	BaseDelay time.Duration
	// MaxDelay caps one backoff (default 5s).
	MaxDelay time.Duration
	// Budget caps the time from the first attempt to the start of the last
	// one: no retry starts after it (default 30s).
	Budget time.Duration
}

// WaitPolicy paces polling for an ENI state: the first poll after Initial,
// then each interval 1.5x the last, capped at Max.
type WaitPolicy struct {
	// Initial is the first poll interval (default 200ms).
	Initial time.Duration
	// Max caps the interval (default 3s).
	Max time.Duration
	// Timeout bounds a whole wait when ctx has no earlier deadline
	// (default 2m).
	Timeout time.Duration
	// Settle is how long the ENI must stay missing, or in a state from
	// which the wanted one cannot follow, before the wait gives up on it
	// (default 2s; describes may lag a change by about a second).
	Settle time.Duration
}

// Observer is told about every attempt of every call, for metrics.
type Observer interface {
	// ObserveCall reports one attempt: the action, "ok" or the error code
	// (a throttled attempt reports its Throttling code; CodeTransport when
	// no answer came), when it started and how long it took, on the
	// client's clock (the observer needs none of its own).
	ObserveCall(action string, outcome string, start time.Time, d time.Duration)
}

// Client calls the ECS and VPC APIs for one region. It is safe for
// concurrent use.
type Client struct {
	cfg       Config // defaults applied
	ecsDomain string
	vpcDomain string
	scheme    string
	transport http.RoundTripper
	clk       clock.Clock
	log       *slog.Logger
	// limiter paces every call: the configured and the learned rate, the
	// backoff after throttling, Normal calls before Optional ones.
	limiter *limiter

	typesMu sync.Mutex                 // guards types
	types   map[string]observed.Limits // instance type -> limits; never invalidated (types do not change)
}

var regionRE = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// New returns a Client. It does not call the API.
func New(cfg Config) (*Client, error) {
	if !regionRE.MatchString(cfg.Region) {
		return nil, fmt.Errorf("cloud client: invalid region %q", cfg.Region)
	}
	if cfg.Credentials == nil {
		return nil, errors.New("cloud client: no credentials")
	}
	setDefaults(&cfg)
	c := &Client{
		cfg:       cfg,
		scheme:    "HTTP",
		transport: cfg.Transport,
		clk:       cfg.Clock,
		log:       cfg.Logger,
		limiter:   newLimiter(cfg.RateLimit, cfg.Retry.BaseDelay, cfg.Retry.MaxDelay, cfg.Clock, cfg.Rand),
		types:     map[string]observed.Limits{},
	}
	switch ep := cfg.Endpoint; {
	case ep == "":
		// The services' own endpoint tables, read once; the regional rule
		// otherwise.
		c.scheme = "HTTPS"
		c.ecsDomain = ecs.GetEndpointMap()[cfg.Region]
		if c.ecsDomain == "" {
			c.ecsDomain = "ecs." + cfg.Region + ".aliyuncs.com"
		}
		c.vpcDomain = vpc.GetEndpointMap()[cfg.Region]
		if c.vpcDomain == "" {
			c.vpcDomain = "vpc." + cfg.Region + ".aliyuncs.com"
		}
	case strings.HasPrefix(ep, "https://"):
		c.scheme = "HTTPS"
		c.ecsDomain = strings.TrimSuffix(strings.TrimPrefix(ep, "https://"), "/")
		c.vpcDomain = c.ecsDomain
	default:
		c.ecsDomain = strings.TrimSuffix(strings.TrimPrefix(ep, "http://"), "/")
		c.vpcDomain = c.ecsDomain
	}
	if c.transport == nil {
		c.transport = &http.Transport{
			Proxy:       nil, // never a proxy: the SDK would read HTTP_PROXY itself
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// An agent has a few calls in flight at most; connections kept
			// beyond that cost a descriptor on each side for nothing (a
			// thousand agents in one bench process ran out at 16 each).
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
			TLSHandshakeTimeout: 5 * time.Second,
		}
	}
	return c, nil
}

// CloseIdleConnections closes the idle keep-alive connections of the
// client's transport (when it has any), e.g. before shutting down a
// simulator it talked to. The client stays usable.
func (c *Client) CloseIdleConnections() {
	if t, ok := c.transport.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
}

func setDefaults(cfg *Config) {
	r := &cfg.Retry
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = 5
	}
	if r.BaseDelay <= 0 {
		r.BaseDelay = 200 * time.Millisecond
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = 5 * time.Second
	}
	if r.Budget <= 0 {
		r.Budget = 30 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	w := &cfg.Wait
	if w.Initial <= 0 {
		w.Initial = 200 * time.Millisecond
	}
	if w.Max <= 0 {
		w.Max = 3 * time.Second
	}
	if w.Timeout <= 0 {
		w.Timeout = 2 * time.Minute
	}
	if w.Settle <= 0 {
		w.Settle = 2 * time.Second
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = 100
	}
	cfg.PageSize = min(max(cfg.PageSize, 10), 500)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
}

// call performs one API call with rate limiting and retries. req and resp
// are reused across attempts (the SDK signs afresh each time).
func (c *Client) call(ctx context.Context, req requests.AcsRequest, resp responses.AcsResponse) error {
	return c.callRepeat(ctx, req, resp, true)
}

// callOnce is call for a request that is not safe to repeat once it may
// have taken effect: a create or assign without a ClientToken. Only
// throttling (refused before any effect) is retried; after a 5xx or a
// transport error the caller must observe before trying again, or it might
// make a second ENI.
func (c *Client) callOnce(ctx context.Context, req requests.AcsRequest, resp responses.AcsResponse) error {
	return c.callRepeat(ctx, req, resp, false)
}

func (c *Client) callRepeat(ctx context.Context, req requests.AcsRequest, resp responses.AcsResponse, repeatable bool) error {
	action := req.GetActionName()
	start := c.clk.Now()
	prio := priorityOf(ctx)
	for attempt := 1; ; attempt++ {
		t, err := c.limiter.wait(ctx, action, prio)
		if err != nil {
			return fmt.Errorf("%s: waiting for the rate limit: %w", action, err)
		}
		err = c.attempt(ctx, req, resp)
		var ae *APIError
		switch {
		case err == nil:
			c.limiter.report(t, answeredOK)
		case errors.Is(err, ErrThrottled):
			c.limiter.report(t, answeredThrottled)
		case errors.As(err, &ae):
			c.limiter.report(t, answeredOther)
		}
		if err == nil || !Retryable(err) || (!repeatable || callerRetries(ctx)) && !errors.Is(err, ErrThrottled) {
			return err
		}
		if errors.Is(err, ErrThrottled) && prio == Optional {
			// Optional work yields: the caller defers it, and calls that
			// waiting pods need take the rate the account has.
			return err
		}
		if attempt >= c.cfg.Retry.MaxAttempts {
			return fmt.Errorf("giving up after %d attempts: %w", attempt, err)
		}
		d := c.backoff(attempt)
		if elapsed := c.clk.Now().Add(d).Sub(start); elapsed > c.cfg.Retry.Budget {
			return fmt.Errorf("giving up after %d attempts (retry budget %v spent): %w", attempt, c.cfg.Retry.Budget, err)
		}
		c.log.LogAttrs(ctx, slog.LevelDebug, "retrying cloud call",
			slog.String("action", action), slog.Int("attempt", attempt),
			slog.Duration("backoff", d), slog.String("error", err.Error()))
		if errors.Is(err, ErrThrottled) {
			// The limiter's shared backoff (in wait, above) paces this
			// retry; sleeping d as well would wait the longer of two draws
			// and stretch a throttled fleet's tail.
			d = 0
		}
		if serr := c.clk.Sleep(ctx, d); serr != nil {
			return fmt.Errorf("%w; then %w", err, serr)
		}
	}
}

// backoff is the wait before retry number n (n >= 1), with equal jitter.
func (c *Client) backoff(n int) time.Duration {
	d := c.cfg.Retry.BaseDelay
	for i := 1; i < n && d < c.cfg.Retry.MaxDelay; i++ {
		d *= 2
	}
	d = min(d, c.cfg.Retry.MaxDelay)
	half := d / 2
	return half + c.limiter.jitter(half)
}

// attempt makes one HTTP exchange through a fresh SDK client. A client per
// attempt is cheap (no I/O) and needed: sdk.Client writes its shared
// http.Client's Timeout on every call, a data race between concurrent
// calls, and its API takes no context.
func (c *Client) attempt(ctx context.Context, req requests.AcsRequest, resp responses.AcsResponse) error {
	action := req.GetActionName()
	actx, cancel := clock.WithTimeout(ctx, c.clk, c.cfg.CallTimeout)
	defer cancel()

	domain := c.ecsDomain
	if req.GetProduct() == "Vpc" {
		domain = c.vpcDomain
	}
	conf := sdk.NewConfig()
	conf.Scheme = c.scheme
	conf.Transport = ctxTransport{ctx: actx, base: c.transport}
	sc := &sdk.Client{Domain: domain}
	if err := sc.InitWithOptions(c.cfg.Region, conf, c.cfg.Credentials); err != nil {
		return fmt.Errorf("%s: init sdk client: %w", action, err)
	}
	req.SetReadTimeout(c.cfg.CallTimeout)
	req.SetConnectTimeout(min(c.cfg.CallTimeout, 5*time.Second))

	t0 := c.clk.Now()
	err := classify(ctx, action, sc.DoAction(req, resp))
	d := c.clk.Now().Sub(t0)
	if c.cfg.Observer != nil {
		outcome := "ok"
		var ae *APIError
		switch {
		case errors.As(err, &ae):
			outcome = ae.Code
		case err != nil:
			outcome = "Canceled"
		}
		c.cfg.Observer.ObserveCall(action, outcome, t0, d)
	}
	return err
}

// ctxTransport gives every request of one attempt the attempt's context,
// which the SDK cannot pass: the context lives exactly as long as the
// attempt's SDK client, and ending it aborts the exchange.
type ctxTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

// RoundTrip sends r under the attempt's context.
func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(r.WithContext(t.ctx))
}

// BackoffUntil is when an Optional call would be granted at once: after
// the shared backoff that follows throttling, and once the calls queued
// ahead of it have gone at the learned rate (zero: it would go now). The
// agent holds optional cloud work until then and wakes at that time.
func (c *Client) BackoffUntil() time.Time { return c.limiter.optionalAt() }

// LearnedRate is the call rate (calls per second) the client has learned
// the account affords: the configured rate until a call is throttled, 0
// without a configured limit.
func (c *Client) LearnedRate() float64 { return c.limiter.learned() }
