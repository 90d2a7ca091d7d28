package cloud

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/internal/clock"
)

// metaServer serves metadata paths from a map, in enforced token mode
// unless tokenless: every GET must carry a token the server issued and has
// not revoked.
type metaServer struct {
	*httptest.Server
	tokenless bool

	mu      sync.Mutex
	paths   map[string]string
	tokens  map[string]bool
	puts    int
	lastTTL string
}

func newMetaServer(t *testing.T, paths map[string]string, tokenless bool) *metaServer {
	m := &metaServer{paths: paths, tokens: map[string]bool{}, tokenless: tokenless}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if r.URL.Path == "/latest/api/token" {
			if m.tokenless {
				http.NotFound(w, r)
				return
			}
			if r.Method != http.MethodPut {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			m.puts++
			m.lastTTL = r.Header.Get("X-aliyun-ecs-metadata-token-ttl-seconds")
			tok := fmt.Sprintf("tok-%d", m.puts)
			m.tokens[tok] = true
			fmt.Fprint(w, tok)
			return
		}
		if !m.tokenless && !m.tokens[r.Header.Get("X-aliyun-ecs-metadata-token")] {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		v, ok := m.paths[strings.TrimPrefix(r.URL.Path, "/latest/meta-data/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, v)
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *metaServer) revokeAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.tokens)
}

func (m *metaServer) tokenPuts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.puts
}

const mac1, mac2 = "00:16:3e:00:00:01", "00:16:3e:00:00:02"

func metaPaths() map[string]string {
	p1 := "network/interfaces/macs/" + mac1 + "/"
	p2 := "network/interfaces/macs/" + mac2 + "/"
	return map[string]string{
		"instance-id":                  "i-abc",
		"region-id":                    "cn-hangzhou",
		"zone-id":                      "cn-hangzhou-k",
		"instance/instance-type":       "ecs.g7.large",
		"vpc-id":                       "vpc-1",
		"network/interfaces/macs/":     "00:16:3E:00:00:02/\n" + mac1 + "/\n",
		p1 + "network-interface-id":    "eni-primary",
		p1 + "vswitch-id":              "vsw-1",
		p1 + "primary-ip-address":      "10.0.0.10",
		p1 + "gateway":                 "10.0.0.253",
		p1 + "vswitch-cidr-block":      "10.0.0.0/24",
		p1 + "private-ipv4s":           `["10.0.0.10"]`,
		p2 + "network-interface-id":    "eni-2",
		p2 + "vswitch-id":              "vsw-2",
		p2 + "primary-ip-address":      "10.0.1.5",
		p2 + "gateway":                 "10.0.1.253",
		p2 + "ipv6-gateway":            "2408:4000::1",
		p2 + "vswitch-cidr-block":      "10.0.1.0/24",
		p2 + "vswitch-ipv6-cidr-block": "2408:4000::/64",
		p2 + "private-ipv4s":           `["10.0.1.9","10.0.1.5","10.0.1.7"]`,
		p2 + "ipv6s":                   "[2408:4000::9,2408:4000::3]",
	}
}

func TestMetadata(t *testing.T) {
	for _, tokenless := range []bool{false, true} {
		t.Run(fmt.Sprintf("tokenless=%v", tokenless), func(t *testing.T) {
			srv := newMetaServer(t, metaPaths(), tokenless)
			md := NewMetadata(srv.URL, nil)
			ctx := testCtx(t)
			for name, f := range map[string]func() (string, error){
				"i-abc":         func() (string, error) { return md.InstanceID(ctx) },
				"cn-hangzhou":   func() (string, error) { return md.RegionID(ctx) },
				"cn-hangzhou-k": func() (string, error) { return md.ZoneID(ctx) },
				"ecs.g7.large":  func() (string, error) { return md.InstanceType(ctx) },
				"vpc-1":         func() (string, error) { return md.VPCID(ctx) },
			} {
				if got, err := f(); err != nil || got != name {
					t.Errorf("got %q, %v; want %q", got, err, name)
				}
			}
			macs, err := md.MACs(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{mac1, mac2}, macs); diff != "" {
				t.Errorf("MACs (-want +got):\n%s", diff)
			}
			got, err := md.Interface(ctx, strings.ToUpper(mac2))
			if err != nil {
				t.Fatal(err)
			}
			a, p := netip.MustParseAddr, netip.MustParsePrefix
			want := MetadataInterface{
				MAC: mac2, ENIID: "eni-2", VSwitchID: "vsw-2",
				Gateway: a("10.0.1.253"), GatewayV6: a("2408:4000::1"),
				CIDR: p("10.0.1.0/24"), IPv6CIDR: p("2408:4000::/64"),
				PrimaryIP: a("10.0.1.5"),
				IPv4:      []netip.Addr{a("10.0.1.7"), a("10.0.1.9")},
				IPv6:      []netip.Addr{a("2408:4000::3"), a("2408:4000::9")},
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(func(x, y netip.Addr) bool { return x == y }), cmp.Comparer(func(x, y netip.Prefix) bool { return x == y })); diff != "" {
				t.Errorf("Interface (-want +got):\n%s", diff)
			}
			got, err = md.Interface(ctx, mac1)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.IPv6) != 0 || len(got.IPv4) != 0 || got.GatewayV6.IsValid() || got.IPv6CIDR.IsValid() || got.PrimaryIP != a("10.0.0.10") {
				t.Errorf("IPv4-only primary interface: %+v", got)
			}
			if _, err := md.Interface(ctx, "00:16:3e:ff:ff:ff"); !errors.Is(err, ErrNotFound) {
				t.Errorf("unknown MAC: got %v, want ErrNotFound", err)
			}
			wantPuts := 1
			if tokenless {
				wantPuts = 0
			}
			if n := srv.tokenPuts(); n != wantPuts {
				t.Errorf("%d token requests for all reads, want %d", n, wantPuts)
			}
		})
	}
}

func TestMetadataTokenRenewal(t *testing.T) {
	srv := newMetaServer(t, metaPaths(), false)
	clk := clock.NewVirtual(time.Unix(1_000_000, 0))
	md := NewMetadata(srv.URL, nil, WithMetadataClock(clk))
	ctx := testCtx(t)
	mustID := func() {
		t.Helper()
		if id, err := md.InstanceID(ctx); err != nil || id != "i-abc" {
			t.Fatalf("InstanceID = %q, %v", id, err)
		}
	}
	mustID()
	srv.mu.Lock()
	ttl := srv.lastTTL
	srv.mu.Unlock()
	if ttl != "21600" {
		t.Errorf("token TTL header %q, want 21600", ttl)
	}
	// The service forgot the token (restart): a 401 renews it once.
	srv.revokeAll()
	mustID()
	if n := srv.tokenPuts(); n != 2 {
		t.Errorf("%d token requests after a revocation, want 2", n)
	}
	// Close to its expiry the token is renewed before use.
	clk.Advance(6 * time.Hour)
	mustID()
	if n := srv.tokenPuts(); n != 3 {
		t.Errorf("%d token requests after 6h, want 3", n)
	}
}
