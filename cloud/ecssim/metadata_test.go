package ecssim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	"github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	"github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/cloud/ecssim"
)

func mdGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(ecssim.MetadataTokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestMetadata(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, ecssim.Config{Clock: clock.Now, MetadataLag: 2 * time.Second, Delays: ecssim.Delays{Attach: ecssim.NoDelay}})
	md := httptest.NewServer(e.sim.MetadataHandler())
	t.Cleanup(md.Close)
	base := md.URL + "/" + e.inst.ID + "/latest/meta-data/"

	for key, want := range map[string]string{
		"instance-id":              e.inst.ID,
		"region-id":                "cn-hangzhou",
		"zone-id":                  "cn-hangzhou-h",
		"instance/instance-type":   "ecs.g7.xlarge",
		"mac":                      e.inst.MAC,
		"vpc-id":                   "vpc-sim",
		"vpc-cidr-block":           "192.168.0.0/16",
		"vswitch-id":               "vsw-sim-h",
		"vswitch-cidr-block":       "192.168.0.0/24",
		"private-ipv4":             e.inst.PrimaryIP.String(),
		"network/interfaces/macs/": e.inst.MAC + "/",
		"network/interfaces/macs/" + e.inst.MAC + "/gateway":              "192.168.0.253",
		"network/interfaces/macs/" + e.inst.MAC + "/netmask":              "255.255.255.0",
		"network/interfaces/macs/" + e.inst.MAC + "/network-interface-id": e.inst.PrimaryENI,
		"network/interfaces/macs/" + e.inst.MAC + "/private-ipv4s":        `["` + e.inst.PrimaryIP.String() + `"]`,
	} {
		if st, got := mdGet(t, base+key, ""); st != 200 || got != want {
			t.Errorf("%s = %d %q, want %q", key, st, got, want)
		}
	}
	// With one instance, the bare /latest/ path serves it too.
	if st, got := mdGet(t, md.URL+"/latest/meta-data/instance-id", ""); st != 200 || got != e.inst.ID {
		t.Errorf("bare path: %d %q", st, got)
	}
	if st, _ := mdGet(t, base+"network/interfaces/macs/"+e.inst.MAC+"/ipv6s", ""); st != 404 {
		t.Errorf("ipv6s without IPv6: %d, want 404", st)
	}

	// A new ENI's MAC appears only MetadataLag after it is InUse.
	eni := e.createENI(t, 2)
	at := ecs.CreateAttachNetworkInterfaceRequest()
	at.NetworkInterfaceId, at.InstanceId = eni.NetworkInterfaceId, e.inst.ID
	if _, err := e.ecs.AttachNetworkInterface(at); err != nil {
		t.Fatal(err)
	}
	e.waitStatus(t, eni.NetworkInterfaceId, "InUse")
	if _, got := mdGet(t, base+"network/interfaces/macs/", ""); got != e.inst.MAC+"/" {
		t.Errorf("macs right after InUse: %q", got)
	}
	if st, _ := mdGet(t, base+"network/interfaces/macs/"+eni.MacAddress+"/gateway", ""); st != 404 {
		t.Errorf("lagging MAC answered %d", st)
	}
	clock.Advance(2 * time.Second)
	if _, got := mdGet(t, base+"network/interfaces/macs/", ""); got != e.inst.MAC+"/\n"+eni.MacAddress+"/" {
		t.Errorf("macs after the lag: %q", got)
	}
	_, ips := mdGet(t, base+"network/interfaces/macs/"+eni.MacAddress+"/private-ipv4s", "")
	var list []string
	if err := json.Unmarshal([]byte(ips), &list); err != nil || len(list) != 3 || list[0] != eni.PrivateIpAddress {
		t.Errorf("private-ipv4s = %q (%v)", ips, err)
	}
}

func TestMetadataTokens(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, ecssim.Config{Clock: clock.Now, MetadataRequireToken: true})
	md := httptest.NewServer(e.sim.MetadataHandler())
	t.Cleanup(md.Close)
	base := md.URL + "/" + e.inst.ID + "/latest/"

	put := func(ttl string) (int, string) {
		req, _ := http.NewRequest("PUT", base+"api/token", nil) // well formed
		if ttl != "" {
			req.Header.Set(ecssim.MetadataTokenTTLHeader, ttl)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body) // checked through the status and token use
		return resp.StatusCode, string(b)
	}
	if st, _ := put(""); st != 400 {
		t.Errorf("token without ttl: %d", st)
	}
	if st, _ := put("21601"); st != 400 {
		t.Errorf("token with ttl 21601: %d", st)
	}
	st, tok := put("60")
	if st != 200 || tok == "" {
		t.Fatalf("token: %d %q", st, tok)
	}
	if st, _ := mdGet(t, base+"meta-data/instance-id", ""); st != 401 {
		t.Errorf("hardened mode without token: %d", st)
	}
	if st, _ := mdGet(t, base+"meta-data/instance-id", "bogus"); st != 401 {
		t.Errorf("bogus token: %d", st)
	}
	if st, got := mdGet(t, base+"meta-data/instance-id", tok); st != 200 || got != e.inst.ID {
		t.Errorf("with token: %d %q", st, got)
	}

	// RAM-role credentials: the role, then an STS key the API accepts.
	_, role := mdGet(t, base+"meta-data/ram/security-credentials/", tok)
	if role != ecssim.DefaultRAMRole {
		t.Fatalf("role = %q", role)
	}
	_, doc := mdGet(t, base+"meta-data/ram/security-credentials/"+role, tok)
	var cred struct{ AccessKeyId, AccessKeySecret, SecurityToken, Expiration, LastUpdated, Code string }
	if err := json.Unmarshal([]byte(doc), &cred); err != nil {
		t.Fatal(err)
	}
	if cred.Code != "Success" || !strings.HasPrefix(cred.AccessKeyId, "STS.") || cred.Expiration != "2026-01-01T06:00:00Z" {
		t.Errorf("credentials: %+v", cred)
	}
	sts := func(token string) error {
		c, err := ecs.NewClientWithOptions("cn-hangzhou", sdk.NewConfig(),
			credentials.NewStaticSTSCredentialsProvider(cred.AccessKeyId, cred.AccessKeySecret, token))
		if err != nil {
			t.Fatal(err)
		}
		c.Domain = e.host
		_, err = c.DescribeInstances(ecs.CreateDescribeInstancesRequest())
		return err
	}
	if err := sts(cred.SecurityToken); err != nil {
		t.Errorf("call with RAM-role credentials: %v", err)
	}
	if got := code(t, sts("wrong-token")); got == "" {
		t.Error("a wrong security token was accepted")
	}
	_, doc2 := mdGet(t, base+"meta-data/ram/security-credentials/"+role, tok)
	if doc2 != doc {
		t.Errorf("credentials changed within their lifetime:\n%s\n%s", doc, doc2)
	}
	clock.Advance(61 * time.Second)
	if st, _ := mdGet(t, base+"meta-data/instance-id", tok); st != 401 {
		t.Errorf("expired token: %d", st)
	}
	clock.Advance(6 * time.Hour)
	if got := code(t, sts(cred.SecurityToken)); got != "InvalidSecurityToken.Expired" {
		t.Errorf("expired STS credentials: %q", got)
	}
}

func TestMetadataFaults(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	md := httptest.NewServer(e.sim.MetadataHandler())
	t.Cleanup(md.Close)
	url := md.URL + "/" + e.inst.ID + "/latest/meta-data/instance-id"
	e.sim.InjectFault(ecssim.Fault{Action: ecssim.MetadataAction, Status: http.StatusTooManyRequests, Count: 2})
	for range 2 {
		if st, _ := mdGet(t, url, ""); st != http.StatusTooManyRequests {
			t.Errorf("scripted metadata fault: status %d, want 429", st)
		}
	}
	if st, body := mdGet(t, url, ""); st != 200 || body != e.inst.ID {
		t.Errorf("after the faults: %d %q", st, body)
	}
	e.sim.SetSettings(ecssim.Settings{MetadataFaults: ecssim.MetadataFaults{Rate: 1, Statuses: []int{503}}})
	if st, _ := mdGet(t, url, ""); st != 503 {
		t.Errorf("rate 1: status %d, want 503", st)
	}
	if n := e.sim.Counters()[ecssim.MetadataAction]; n["429"] != 2 || n["503"] != 1 {
		t.Errorf("metadata fault counters %v", n)
	}
}

// TestMetadataDocumented: the items "Instance metadata items" lists that
// the simulator serves beside the network ones, and the token rule of
// "View instance metadata": no token for a request that came through a
// proxy (X-Forwarded-For).
func TestMetadataDocumented(t *testing.T) {
	e := newEnv(t, ecssim.Config{MetadataRequireToken: true})
	md := httptest.NewServer(e.sim.MetadataHandler())
	t.Cleanup(md.Close)
	base := md.URL + "/" + e.inst.ID + "/latest/"

	put := func(forwarded bool) (int, string) {
		req, _ := http.NewRequest("PUT", base+"api/token", nil) // well formed
		req.Header.Set(ecssim.MetadataTokenTTLHeader, "60")
		if forwarded {
			req.Header.Set("X-Forwarded-For", "203.0.113.7")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body) // checked through the status and token use
		return resp.StatusCode, string(b)
	}
	if st, _ := put(true); st != http.StatusForbidden {
		t.Errorf("token request with X-Forwarded-For: %d, want 403", st)
	}
	st, tok := put(false)
	if st != 200 {
		t.Fatalf("token: %d", st)
	}
	if st, v := mdGet(t, base+"meta-data/network-type", tok); st != 200 || v != "vpc" {
		t.Errorf("network-type: %d %q", st, v)
	}
	if st, _ := mdGet(t, base+"dynamic/instance-identity/document", ""); st != 401 {
		t.Errorf("identity document without a token in hardened mode: %d", st)
	}
	st, doc := mdGet(t, base+"dynamic/instance-identity/document", tok)
	if st != 200 {
		t.Fatalf("identity document: %d %q", st, doc)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatalf("identity document %q: %v", doc, err)
	}
	_, serial := mdGet(t, base+"meta-data/serial-number", tok)
	_, image := mdGet(t, base+"meta-data/image-id", tok)
	want := map[string]string{
		"zone-id": "cn-hangzhou-h", "instance-id": e.inst.ID, "region-id": "cn-hangzhou", "private-ipv4": e.inst.PrimaryIP.String(),
		"owner-account-id": got["owner-account-id"], "mac": e.inst.MAC, "instance-type": "ecs.g7.xlarge",
		"serial-number": serial, "image-id": image,
	}
	if d := cmp.Diff(want, got); d != "" || got["owner-account-id"] == "" || serial == "" || image == "" {
		t.Errorf("identity document (-want +got):\n%s", d)
	}
	if st, v := mdGet(t, base+"dynamic/instance-identity/", tok); st != 200 || v != "document" {
		t.Errorf("dynamic/instance-identity/: %d %q", st, v)
	}
}

// With several instances, the bare /latest/ path answers the instance
// whose primary address the request comes from, as ECS's metadata
// service does, and no instance for any other source.
func TestMetadataCallerBySource(t *testing.T) {
	e := newEnv(t, ecssim.Config{})
	other, err := e.sim.AddInstance(ecssim.InstanceSpec{})
	if err != nil {
		t.Fatal(err)
	}
	h := e.sim.MetadataHandler()
	get := func(src string) (int, string) {
		req := httptest.NewRequest("GET", "/latest/meta-data/instance-id", nil)
		req.RemoteAddr = src
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	for _, in := range []ecssim.InstanceInfo{e.inst, other} {
		if st, got := get(in.PrimaryIP.String() + ":40000"); st != 200 || got != in.ID {
			t.Errorf("from %s: %d %q, want %s", in.PrimaryIP, st, got, in.ID)
		}
	}
	if st, got := get("127.0.0.1:40000"); st != 404 {
		t.Errorf("from an address no instance holds: %d %q, want 404", st, got)
	}
}

// An instance added with IPv6Count has that many IPv6 addresses on its
// primary ENI (RunInstances' Ipv6AddressCount), in its vSwitch's IPv6
// CIDR: in InstanceInfo, the ENI's event and the metadata's ipv6s, and
// the event's GatewayV6 is the metadata's ipv6-gateway. More
// than the type's IPv6 per ENI, or a vSwitch without IPv6, is refused.
func TestAddInstancePrimaryIPv6(t *testing.T) {
	e := newEnv(t, ecssim.Config{MetadataLag: ecssim.NoDelay})
	in, err := e.sim.AddInstance(ecssim.InstanceSpec{IPv6Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	v6 := e.sim.Dump().VSwitches[0].IPv6CIDR
	if len(in.PrimaryIPv6) != 1 || !v6.Contains(in.PrimaryIPv6[0]) {
		t.Fatalf("PrimaryIPv6 = %v, want one address of %s", in.PrimaryIPv6, v6)
	}
	if ev, ok := e.sim.Event(in.PrimaryENI); !ok || !slices.Equal(ev.IPv6, in.PrimaryIPv6) {
		t.Errorf("event IPv6 = %v, want %v", ev.IPv6, in.PrimaryIPv6)
	}
	md := httptest.NewServer(e.sim.MetadataHandler())
	t.Cleanup(md.Close)
	key := md.URL + "/" + in.ID + "/latest/meta-data/network/interfaces/macs/" + in.MAC + "/ipv6s"
	if st, got := mdGet(t, key, ""); st != 200 || got != "["+in.PrimaryIPv6[0].String()+"]" {
		t.Errorf("ipv6s = %d %q, want [%s]", st, got, in.PrimaryIPv6[0])
	}
	// The event names the IPv6 gateway the metadata gives (what a
	// harness plugging the ENI must answer).
	ev, _ := e.sim.Event(in.PrimaryENI)
	gwKey := strings.TrimSuffix(key, "ipv6s") + "ipv6-gateway"
	if st, got := mdGet(t, gwKey, ""); st != 200 || !ev.GatewayV6.IsValid() || got != ev.GatewayV6.String() {
		t.Errorf("ipv6-gateway = %d %q, event GatewayV6 %v: want the same address", st, got, ev.GatewayV6)
	}
	if _, err := e.sim.AddInstance(ecssim.InstanceSpec{IPv6Count: 99}); err == nil || !strings.Contains(err.Error(), "Ipv6AddressCount 99") {
		t.Errorf("IPv6Count 99: %v, want a refusal naming Ipv6AddressCount", err)
	}
	v4only, err := ecssim.New(ecssim.Config{VSwitches: []ecssim.VSwitchConfig{{ID: "vsw-4", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.9.0/24")}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v4only.Close() })
	if _, err := v4only.AddInstance(ecssim.InstanceSpec{IPv6Count: 1}); err == nil {
		t.Error("IPv6Count 1 on a vSwitch without IPv6 was accepted")
	}
}
