package cloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/enidnet/enid/internal/clock"
)

// DefaultMetadataURL is the ECS instance metadata service.
const DefaultMetadataURL = "http://100.100.100.200"

// Metadata token protocol (ECS "security hardening mode").
const (
	metadataTokenPath      = "/latest/api/token"
	metadataTokenTTLHeader = "X-aliyun-ecs-metadata-token-ttl-seconds"
	metadataTokenHeader    = "X-aliyun-ecs-metadata-token"
	metadataTokenTTL       = 6 * time.Hour // the most ECS grants (21600 s)
)

// Metadata reads the instance metadata service. It fetches a session token
// (PUT /latest/api/token) and sends it with every read, renewing it before
// it expires; a service that does not know tokens (404/405 on the PUT) is
// read without one. It is safe for concurrent use.
type Metadata struct {
	base string
	hc   *http.Client
	clk  clock.Clock

	mu       sync.Mutex // guards token, tokenExp, tokenless
	token    string
	tokenExp time.Time
	// tokenless is set when the service refused the token PUT as unknown.
	tokenless bool
}

// MetadataOption changes a Metadata client.
type MetadataOption func(*Metadata)

// WithMetadataClock sets the clock that times token renewal, the retries'
// backoff and the renewal of credentials read through it (default:
// clock.Real).
func WithMetadataClock(clk clock.Clock) MetadataOption {
	return func(m *Metadata) { m.clk = clock.OrReal(clk) }
}

// NewMetadata returns a metadata client for baseURL ("" is
// DefaultMetadataURL) using hc (nil: a client with a 5 s timeout that never
// uses a proxy).
func NewMetadata(baseURL string, hc *http.Client, opts ...MetadataOption) *Metadata {
	if baseURL == "" {
		baseURL = DefaultMetadataURL
	}
	if hc == nil {
		hc = &http.Client{
			Timeout: 5 * time.Second,
			Transport: &http.Transport{
				Proxy:       nil,
				DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			},
		}
	}
	m := &Metadata{base: strings.TrimSuffix(baseURL, "/"), hc: hc, clk: clock.Real{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// MetadataInterface is what metadata says about one network interface.
type MetadataInterface struct {
	// MAC is lower-case, colon separated.
	MAC       string
	ENIID     string
	Gateway   netip.Addr
	GatewayV6 netip.Addr // zero when the vSwitch has no IPv6
	VSwitchID string
	CIDR      netip.Prefix // the vSwitch CIDR
	IPv6CIDR  netip.Prefix // zero when the vSwitch has no IPv6
	PrimaryIP netip.Addr
	// IPv4 holds the secondary private IPv4 addresses (the primary one
	// excluded, as in observed.ENI), sorted.
	IPv4 []netip.Addr
	// IPv6 holds the interface's IPv6 addresses, sorted.
	IPv6 []netip.Addr
}

// InstanceID returns the instance ID.
func (m *Metadata) InstanceID(ctx context.Context) (string, error) {
	return m.value(ctx, "instance-id")
}

// RegionID returns the region ID.
func (m *Metadata) RegionID(ctx context.Context) (string, error) {
	return m.value(ctx, "region-id")
}

// ZoneID returns the zone ID.
func (m *Metadata) ZoneID(ctx context.Context) (string, error) {
	return m.value(ctx, "zone-id")
}

// InstanceType returns the instance type.
func (m *Metadata) InstanceType(ctx context.Context) (string, error) {
	return m.value(ctx, "instance/instance-type")
}

// VPCID returns the VPC ID.
func (m *Metadata) VPCID(ctx context.Context) (string, error) {
	return m.value(ctx, "vpc-id")
}

// MACs returns the MACs of the interfaces metadata knows, lower-case and
// sorted. An ENI attached a moment ago may not be listed yet.
func (m *Metadata) MACs(ctx context.Context) ([]string, error) {
	s, err := m.get(ctx, "network/interfaces/macs/")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Fields(s) {
		if l = strings.ToLower(strings.TrimSuffix(l, "/")); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Interface returns what metadata says about the interface with mac. The
// error wraps ErrNotFound when metadata does not know the MAC (yet).
func (m *Metadata) Interface(ctx context.Context, mac string) (MetadataInterface, error) {
	mac = strings.ToLower(mac)
	out := MetadataInterface{MAC: mac}
	p := "network/interfaces/macs/" + mac + "/"
	var err error
	if out.ENIID, err = m.value(ctx, p+"network-interface-id"); err != nil {
		return out, err
	}
	if out.VSwitchID, err = m.value(ctx, p+"vswitch-id"); err != nil {
		return out, err
	}
	if out.PrimaryIP, err = m.addr(ctx, p+"primary-ip-address", false); err != nil {
		return out, err
	}
	if out.Gateway, err = m.addr(ctx, p+"gateway", false); err != nil {
		return out, err
	}
	if out.GatewayV6, err = m.addr(ctx, p+"ipv6-gateway", true); err != nil {
		return out, err
	}
	if out.CIDR, err = m.prefix(ctx, p+"vswitch-cidr-block", false); err != nil {
		return out, err
	}
	if out.IPv6CIDR, err = m.prefix(ctx, p+"vswitch-ipv6-cidr-block", true); err != nil {
		return out, err
	}
	v4, err := m.addrList(ctx, p+"private-ipv4s")
	if err != nil {
		return out, err
	}
	out.IPv4 = slices.DeleteFunc(v4, func(a netip.Addr) bool { return a == out.PrimaryIP })
	if out.IPv6, err = m.addrList(ctx, p+"ipv6s"); err != nil {
		return out, err
	}
	return out, nil
}

// RAMRoles lists the RAM roles attached to the instance.
func (m *Metadata) RAMRoles(ctx context.Context) ([]string, error) {
	s, err := m.get(ctx, "ram/security-credentials/")
	if err != nil {
		return nil, err
	}
	return strings.Fields(s), nil
}

// RAMCredentials are the temporary credentials of an instance RAM role.
type RAMCredentials struct {
	AccessKeyID     string    `json:"AccessKeyId"`
	AccessKeySecret string    `json:"AccessKeySecret"`
	SecurityToken   string    `json:"SecurityToken"`
	Expiration      time.Time `json:"Expiration"`
	Code            string    `json:"Code"`
}

// RAMCredentials returns the current credentials of role.
func (m *Metadata) RAMCredentials(ctx context.Context, role string) (RAMCredentials, error) {
	var c RAMCredentials
	s, err := m.get(ctx, "ram/security-credentials/"+role)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return c, fmt.Errorf("metadata ram role %s: %w", role, err)
	}
	if c.Code != "Success" || c.AccessKeyID == "" || c.AccessKeySecret == "" {
		return c, fmt.Errorf("metadata ram role %s: answer code %q without complete keys", role, c.Code)
	}
	return c, nil
}

func (m *Metadata) value(ctx context.Context, path string) (string, error) {
	s, err := m.get(ctx, path)
	return strings.TrimSpace(s), err
}

// addr reads an address; optional paths that are missing give the zero Addr.
func (m *Metadata) addr(ctx context.Context, path string, optional bool) (netip.Addr, error) {
	s, err := m.value(ctx, path)
	if optional && errors.Is(err, ErrNotFound) || err == nil && optional && s == "" {
		return netip.Addr{}, nil
	}
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, fmt.Errorf("metadata %s: %w", path, err)
	}
	return a, nil
}

func (m *Metadata) prefix(ctx context.Context, path string, optional bool) (netip.Prefix, error) {
	s, err := m.value(ctx, path)
	if optional && errors.Is(err, ErrNotFound) || err == nil && optional && s == "" {
		return netip.Prefix{}, nil
	}
	if err != nil {
		return netip.Prefix{}, err
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("metadata %s: %w", path, err)
	}
	return p, nil
}

// addrList reads `["a","b"]` or `[a,b]` (metadata uses both); a missing
// path is an empty list.
func (m *Metadata) addrList(ctx context.Context, path string) ([]netip.Addr, error) {
	s, err := m.value(ctx, path)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	var out []netip.Addr
	for f := range strings.SplitSeq(s, ",") {
		f = strings.Trim(strings.TrimSpace(f), `"`)
		if f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("metadata %s: %w", path, err)
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// Metadata retries: a 5xx or 429 answer (the service is busy or briefly
// failing, as it is under load) is retried up to metadataAttempts times in
// all, the n-th retry after a random wait in [d/2, d], d =
// metadataBaseDelay*2^(n-1): at most about 0.75 s of waiting in all, so a
// caller's bound (the pass, the heartbeat) still holds.
const (
	metadataAttempts  = 4
	metadataBaseDelay = 100 * time.Millisecond
)

// errMetadataBusy marks a 5xx or 429 answer of the metadata service.
var errMetadataBusy = errors.New("metadata service busy")

// busyStatus reports whether an HTTP status is worth retrying.
func busyStatus(code int) bool {
	return code >= 500 || code == http.StatusTooManyRequests
}

// get reads /latest/meta-data/<path>. A 404 wraps ErrNotFound. A 401 (a
// token the service no longer accepts) renews the token and tries once
// more; a 5xx or 429 is retried with a bounded, jittered backoff.
func (m *Metadata) get(ctx context.Context, path string) (string, error) {
	var err error
	for attempt := 1; ; attempt++ {
		var s string
		s, err = m.getOnce(ctx, path)
		if !errors.Is(err, errMetadataBusy) || attempt >= metadataAttempts {
			return s, err
		}
		d := metadataBaseDelay << (attempt - 1)
		d = d/2 + rand.N(d/2+1)
		if serr := m.clk.Sleep(ctx, d); serr != nil {
			return "", fmt.Errorf("%w; then %w", err, serr)
		}
	}
}

func (m *Metadata) getOnce(ctx context.Context, path string) (string, error) {
	for try := 0; ; try++ {
		tok, err := m.sessionToken(ctx)
		if err != nil {
			return "", err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+"/latest/meta-data/"+path, nil)
		if err != nil {
			return "", fmt.Errorf("metadata %s: %w", path, err)
		}
		if tok != "" {
			req.Header.Set(metadataTokenHeader, tok)
		}
		resp, err := m.hc.Do(req)
		if err != nil {
			return "", fmt.Errorf("metadata %s: %w", path, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return "", fmt.Errorf("metadata %s: %w", path, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			return string(body), nil
		case resp.StatusCode == http.StatusNotFound:
			return "", fmt.Errorf("metadata %s: %w", path, ErrNotFound)
		case resp.StatusCode == http.StatusUnauthorized && try == 0:
			m.dropToken()
			continue
		case busyStatus(resp.StatusCode):
			return "", fmt.Errorf("metadata %s: http %d: %w", path, resp.StatusCode, errMetadataBusy)
		}
		return "", fmt.Errorf("metadata %s: http %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
}

// sessionToken returns a valid token, fetching one when needed, or "" when
// the service works without tokens.
func (m *Metadata) sessionToken(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	if m.tokenless {
		return "", nil
	}
	if m.token != "" && now.Before(m.tokenExp) {
		return m.token, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, m.base+metadataTokenPath, nil)
	if err != nil {
		return "", fmt.Errorf("metadata token: %w", err)
	}
	req.Header.Set(metadataTokenTTLHeader, fmt.Sprint(int(metadataTokenTTL.Seconds())))
	resp, err := m.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("metadata token: %w", err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		return "", fmt.Errorf("metadata token: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		m.tokenless = true
		return "", nil
	default:
		if busyStatus(resp.StatusCode) {
			return "", fmt.Errorf("metadata token: http %d: %w", resp.StatusCode, errMetadataBusy)
		}
		return "", fmt.Errorf("metadata token: http %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	m.token = strings.TrimSpace(string(body))
	// Renew well before the service forgets it.
	m.tokenExp = now.Add(metadataTokenTTL - 10*time.Minute)
	return m.token, nil
}

func (m *Metadata) dropToken() {
	m.mu.Lock()
	m.token = ""
	m.mu.Unlock()
}
