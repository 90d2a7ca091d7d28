package cloud_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/observed"
)

func TestContractErrorClasses(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "ecs.g7.large", nil) // 3 ENIs, 6 IPv4 per ENI
	ctx := e.ctx
	tags := ownerTags(e.inst.ID)

	if err := e.c.AttachENI(ctx, "eni-nosuch", e.inst.ID); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("attach unknown ENI: %v, want ErrNotFound", err)
	}
	if _, err := e.c.CreateENI(ctx, cloud.CreateENIRequest{VSwitchID: "vsw-nosuch", SecurityGroups: []string{ecssim.DefaultSecurityGroup}}); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("create in unknown vswitch: %v, want ErrNotFound", err)
	}
	if _, err := e.c.AssignIPv4(ctx, "eni-nosuch", 1, nil, ""); !errors.Is(err, cloud.ErrNotFound) {
		t.Errorf("assign to unknown ENI: %v, want ErrNotFound", err)
	}

	// The primary ENI is never detached.
	if err := e.c.DetachENI(ctx, e.inst.PrimaryENI, e.inst.ID); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("detach primary: %v, want ErrConflict", err)
	}

	// Per-type limits: 2 secondary ENIs fit, the third does not.
	var enis []observed.ENI
	for range 3 {
		enis = append(enis, e.create(t, cloud.CreateENIRequest{Tags: tags}))
	}
	e.attach(t, enis[0].ID)
	e.attach(t, enis[1].ID)
	if err := e.c.AttachENI(ctx, enis[2].ID, e.inst.ID); !errors.Is(err, cloud.ErrLimitExceeded) {
		t.Errorf("attach beyond EniQuantity: %v, want ErrLimitExceeded", err)
	}
	// 6 IPv4 per ENI, the primary included: 5 secondaries fit.
	if _, err := e.c.AssignIPv4(ctx, enis[0].ID, 5, nil, ""); err != nil {
		t.Fatalf("assign up to the limit: %v", err)
	}
	if _, err := e.c.AssignIPv4(ctx, enis[0].ID, 1, nil, ""); !errors.Is(err, cloud.ErrLimitExceeded) {
		t.Errorf("assign beyond EniPrivateIpAddressQuantity: %v, want ErrLimitExceeded", err)
	}
	// An address another ENI holds is a conflict.
	taken := describe(t, e, enis[0].ID).IPv4[0]
	if _, err := e.c.AssignIPv4(ctx, enis[1].ID, 0, []netip.Addr{taken}, ""); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("assign a taken address: %v, want ErrConflict", err)
	}
	// An ENI in use by us cannot go to another instance, nor be deleted.
	other, err := e.sim.AddInstance(ecssim.InstanceSpec{InstanceType: "ecs.g7.large", VSwitchID: e.inst.VSwitchID})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.c.AttachENI(ctx, enis[0].ID, other.ID); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("attach an InUse ENI elsewhere: %v, want ErrConflict", err)
	}
	if err := e.c.DeleteENI(ctx, enis[0].ID); !errors.Is(err, cloud.ErrConflict) {
		t.Errorf("delete an InUse ENI: %v, want ErrConflict", err)
	}

	// Wrong keys are an auth error, not retried.
	bad := e.cfg
	bad.Credentials = credentials.NewStaticAKCredentialsProvider(ecssim.DefaultAccessKeyID, "wrong")
	bc, err := cloud.New(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bc.ListENIs(ctx, cloud.ENIFilter{InstanceID: e.inst.ID}); !errors.Is(err, cloud.ErrAuth) || cloud.Retryable(err) {
		t.Errorf("wrong secret: %v, want a non-retryable ErrAuth", err)
	}
}

func TestContractVSwitchExhausted(t *testing.T) {
	// A /28 holds 16 addresses; the simulator reserves some; 20 cannot fit.
	e := newSimEnv(t, ecssim.Config{
		Zones:     []string{"cn-hangzhou-h"},
		VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-tiny", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.7.0/28")}},
	}, "ecs.g7.4xlarge", nil)
	_, err := e.c.CreateENI(e.ctx, cloud.CreateENIRequest{VSwitchID: "vsw-tiny", SecurityGroups: []string{ecssim.DefaultSecurityGroup}, IPv4Count: 20})
	if !errors.Is(err, cloud.ErrVSwitchExhausted) || cloud.Retryable(err) {
		t.Errorf("create beyond the vswitch: %v, want a non-retryable ErrVSwitchExhausted", err)
	}
}

func TestContractRetries(t *testing.T) {
	rec := &observer{}
	e := newSimEnv(t, ecssim.Config{}, "", func(c *cloud.Config) { c.Observer = rec })
	ctx := e.ctx
	list := func() error {
		_, err := e.c.ListENIs(ctx, cloud.ENIFilter{InstanceID: e.inst.ID})
		return err
	}

	// Throttling and 5xx within the budget: the call succeeds.
	for _, code := range []string{"Throttling", "Throttling.User", "InternalError", "ServiceUnavailable", "Operation.Conflict"} {
		e.sim.ResetCounters()
		e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: code, Count: 3})
		if err := list(); err != nil {
			t.Errorf("%s x3 then ok: %v", code, err)
		}
		if got := e.sim.Counters()["DescribeNetworkInterfaces"]; !cmp.Equal(map[string]int{code: 3, "ok": 1}, got) {
			t.Errorf("%s: server saw %v", code, got)
		}
	}
	// More failures than MaxAttempts (4): the classified error.
	e.sim.ResetCounters()
	e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: "Throttling.User", Count: 10})
	if err := list(); !errors.Is(err, cloud.ErrThrottled) {
		t.Errorf("throttled beyond the budget: %v, want ErrThrottled", err)
	}
	if n := e.calls("DescribeNetworkInterfaces", "Throttling.User"); n != 4 {
		t.Errorf("%d attempts, want 4", n)
	}
	e.sim.SetSettings(ecssim.Settings{}) // clear what is left

	e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: "ServiceUnavailable", Count: 10})
	if err := list(); !errors.Is(err, cloud.ErrUnavailable) {
		t.Errorf("5xx beyond the budget: %v, want ErrUnavailable", err)
	}
	e.sim.SetSettings(ecssim.Settings{})

	// Non-retryable codes are tried once.
	e.sim.ResetCounters()
	e.sim.InjectFault(ecssim.Fault{Action: "DescribeNetworkInterfaces", Code: "InvalidParameter", Count: 5})
	if err := list(); err == nil || cloud.Retryable(err) {
		t.Errorf("InvalidParameter: %v", err)
	}
	if n := e.calls("DescribeNetworkInterfaces", "InvalidParameter"); n != 1 {
		t.Errorf("InvalidParameter tried %d times, want 1", n)
	}
	e.sim.SetSettings(ecssim.Settings{})

	if n := rec.count("DescribeNetworkInterfaces", "Throttling.User"); n < 4 {
		t.Errorf("observer saw %d Throttling.User attempts, want >= 4", n)
	}
}

// TestContractAccountRateLimit runs a burst against an account limit of
// 20/s: without a client limit the client is throttled but its retries get
// through; with a client limit below the account's it is never throttled.
func TestContractAccountRateLimit(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{AccountRateLimit: ecssim.RateLimit{QPS: 20, Burst: 2}}, "", func(c *cloud.Config) {
		c.Retry = cloud.RetryPolicy{MaxAttempts: 20, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Budget: 5 * time.Second}
	})
	burst := func(c *cloud.Client) {
		t.Helper()
		for range 10 {
			if _, err := c.ListENIs(e.ctx, cloud.ENIFilter{InstanceID: e.inst.ID}); err != nil {
				t.Fatalf("within the retry budget: %v", err)
			}
		}
	}
	e.sim.ResetCounters()
	burst(e.c)
	if n := e.calls("DescribeNetworkInterfaces", "Throttling.User"); n == 0 {
		t.Errorf("no throttling seen without a client limit: is the account limit on?")
	}
	limited := e.cfg
	limited.RateLimit.QPS, limited.RateLimit.Burst = 15, 1
	lc, err := cloud.New(limited)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // let the account bucket refill
	e.sim.ResetCounters()
	burst(lc)
	if n := e.calls("DescribeNetworkInterfaces", "Throttling.User"); n != 0 {
		t.Errorf("%d throttled calls under a client limit below the account's", n)
	}
}

// observer counts attempts by action and outcome.
type observer struct {
	mu sync.Mutex
	n  map[[2]string]int
}

func (o *observer) ObserveCall(action, outcome string, _ time.Time, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[[2]string]int{}
	}
	o.n[[2]string{action, outcome}]++
}

func (o *observer) count(action, outcome string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[[2]string{action, outcome}]
}

// A token whose create failed with a non-5xx error is burnt: the resend is
// ErrTokenBurnt and Definite (the caller must derive a new token); an
// OperationConflict is retried, and an attach refused with conflicts until
// the retries run out still succeeds when a lookup shows it happened.
func TestContractBurntTokenAndConflicts(t *testing.T) {
	e := newSimEnv(t, ecssim.Config{}, "", nil)
	e.sim.InjectFault(ecssim.Fault{Action: "CreateNetworkInterface", Code: "InvalidVSwitchId.IpNotEnough"})
	req := cloud.CreateENIRequest{VSwitchID: e.inst.VSwitchID, SecurityGroups: []string{ecssim.DefaultSecurityGroup},
		Tags: ownerTags(e.inst.ID), ClientToken: cloud.ClientToken("burnt")}
	_, err := e.c.CreateENI(e.ctx, req)
	if !errors.Is(err, cloud.ErrVSwitchExhausted) || !cloud.Definite(err) {
		t.Fatalf("first create: %v, want a definite ErrVSwitchExhausted", err)
	}
	_, err = e.c.CreateENI(e.ctx, req)
	if !errors.Is(err, cloud.ErrTokenBurnt) || !cloud.Definite(err) || cloud.Retryable(err) {
		t.Fatalf("resend of the burnt token: %v, want a definite ErrTokenBurnt", err)
	}
	req.ClientToken = cloud.ClientToken("burnt", "attempt", "1")
	e.sim.InjectFault(ecssim.Fault{Action: "CreateNetworkInterface", Code: "OperationConflict", Count: 2})
	eni, err := e.c.CreateENI(e.ctx, req)
	if err != nil {
		t.Fatalf("a new token after two conflicts: %v", err)
	}
	if n := e.calls("CreateNetworkInterface", "OperationConflict"); n != 2 {
		t.Errorf("%d conflicts served, want 2", n)
	}
	if err := e.c.AttachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Fatal(err)
	}
	// The answer to the attach was lost; every resend meets the attach in
	// progress. The lookup finds it Attaching or InUse: done.
	e.sim.InjectFault(ecssim.Fault{Action: "AttachNetworkInterface", Code: "InvalidOperation.InvalidEcsState", Count: 100})
	if err := e.c.AttachENI(e.ctx, eni.ID, e.inst.ID); err != nil {
		t.Errorf("attach after conflicts, already attached: %v", err)
	}
}
