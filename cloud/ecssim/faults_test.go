package ecssim_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

func control(t *testing.T, e *env, method, path string, body any, out any) {
	t.Helper()
	var rd bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&rd).Encode(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, "http://"+e.host+path, &rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

func TestScriptedFaultsAndCounters(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	id := e.createENI(t, 0).NetworkInterfaceId
	control(t, e, "POST", "/_sim/reset-counters", nil, nil)
	control(t, e, "POST", "/_sim/faults", ecssim.Fault{Action: "AttachNetworkInterface", Code: "InternalError", Count: 2}, nil)

	at := ecs.CreateAttachNetworkInterfaceRequest()
	at.NetworkInterfaceId, at.InstanceId = id, e.inst.ID
	for range 2 {
		_, err := e.ecs.AttachNetworkInterface(at)
		if code(t, err) != "InternalError" {
			t.Fatalf("scripted fault: %v", err)
		}
		var se interface{ HttpStatus() int }
		if asServerErr(err, &se) && se.HttpStatus() != 500 {
			t.Errorf("InternalError status %d", se.HttpStatus())
		}
	}
	// Other actions are not affected, and the fault is spent after two.
	if _, err := e.ecs.DescribeInstances(ecsDescribeInstances()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ecs.AttachNetworkInterface(at); err != nil {
		t.Fatalf("after the scripted faults: %v", err)
	}
	var counters map[string]map[string]int
	control(t, e, "GET", "/_sim/counters", nil, &counters)
	want := map[string]map[string]int{
		"AttachNetworkInterface": {"InternalError": 2, "ok": 1},
		"DescribeInstances":      {"ok": 1},
	}
	if d := cmp.Diff(want, counters); d != "" {
		t.Errorf("counters (-want +got):\n%s", d)
	}
	var st ecssim.State
	control(t, e, "GET", "/_sim/state", nil, &st)
	if len(st.ENIs) != 2 || len(st.Instances) != 1 {
		t.Errorf("state over the control API: %d ENIs, %d instances", len(st.ENIs), len(st.Instances))
	}
}

func TestRandomFaultsRateLimitLatency(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	e.sim.InjectFault(ecssim.Fault{Action: "DescribeInstances", Rate: 1})
	seen := map[string]bool{}
	for range 30 {
		_, err := e.ecs.DescribeInstances(ecsDescribeInstances())
		seen[code(t, err)] = true
	}
	if d := cmp.Diff(map[string]bool{"Throttling": true, "InternalError": true, "ServiceUnavailable": true}, seen); d != "" {
		t.Errorf("codes at rate 1 (-want +got):\n%s", d)
	}
	if _, err := e.ecs.DescribeInstanceTypes(ecs.CreateDescribeInstanceTypesRequest()); err != nil {
		t.Errorf("another action failed: %v", err)
	}

	control(t, e, "POST", "/_sim/settings", ecssim.Settings{AccountRateLimit: ecssim.RateLimit{QPS: 0.001, Burst: 3}}, nil)
	var codes []string
	for range 5 {
		_, err := e.ecs.DescribeInstances(ecsDescribeInstances())
		codes = append(codes, code(t, err))
	}
	if d := cmp.Diff([]string{"", "", "", "Throttling.User", "Throttling.User"}, codes); d != "" {
		t.Errorf("rate limit (-want +got):\n%s", d)
	}

	e.sim.SetSettings(ecssim.Settings{Latency: ecssim.Latency{Fixed: 80 * time.Millisecond}})
	start := time.Now()
	if _, err := e.ecs.DescribeInstances(ecsDescribeInstances()); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 80*time.Millisecond {
		t.Errorf("call took %v with 80ms fixed latency", el)
	}
}
