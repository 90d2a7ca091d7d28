package ecssim

import (
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Metadata token headers.
const (
	MetadataTokenHeader    = "X-aliyun-ecs-metadata-token"
	MetadataTokenTTLHeader = "X-aliyun-ecs-metadata-token-ttl-seconds"
)

// ownerAccountID is the simulated account's ID.
const ownerAccountID = "1234567890123456"

// ramCredentialTTL is how long RAM-role credentials from the metadata
// service stay valid; they are renewed when less than a third remains.
const ramCredentialTTL = 6 * time.Hour

// MetadataHandler serves the instance metadata service. Paths are
// /<instanceID>/latest/... for any instance, and /latest/... when exactly
// one instance exists.
func (s *Server) MetadataHandler() http.Handler {
	return http.HandlerFunc(s.serveMetadata)
}

func (s *Server) serveMetadata(w http.ResponseWriter, r *http.Request) {
	// The first path segment names the instance, unless it is "latest":
	// then the caller is, as on ECS, where the service answers each
	// instance about itself: the instance whose primary address the
	// request comes from, or the only instance.
	path := r.URL.Path
	inst := ""
	if rest, ok := strings.CutPrefix(path, "/latest/"); ok {
		path = "/latest/" + rest
		inst = s.callerInstance(r.RemoteAddr)
	} else {
		id, tail, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
		inst, path = id, "/"+tail
	}
	s.mu.Lock()
	_, known := s.m.instances[inst]
	s.mu.Unlock()
	if !known {
		http.Error(w, "no such instance", http.StatusNotFound)
		return
	}
	s.mu.Lock()
	fault := s.metadataFaultLocked()
	s.mu.Unlock()
	if fault != 0 {
		s.count(MetadataAction, strconv.Itoa(fault))
		http.Error(w, http.StatusText(fault), fault)
		return
	}
	if path == "/latest/api/token" {
		s.serveToken(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !s.tokenOK(r) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	var body string
	ok := false
	if key, isMeta := strings.CutPrefix(path, "/latest/meta-data/"); isMeta {
		body, ok = s.metadataValue(inst, key)
	} else if key, isDyn := strings.CutPrefix(path, "/latest/dynamic/"); isDyn {
		body, ok = s.dynamicValue(inst, key)
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprint(w, body)
}

// serveToken issues a metadata token (security hardening mode). The
// metadata documentation ("View instance metadata") gives its rules: a TTL
// of 1 to 21600 seconds in X-aliyun-ecs-metadata-token-ttl-seconds, and no
// proxy access: a token request carrying X-Forwarded-For is refused. It
// gives no status for either refusal; the simulator answers 400 for a bad
// TTL and 403 for a forwarded request.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if _, fwd := r.Header["X-Forwarded-For"]; fwd {
		http.Error(w, "Forbidden: a token is not issued to a request that came through a proxy (X-Forwarded-For)", http.StatusForbidden)
		return
	}
	ttl, err := strconv.Atoi(r.Header.Get(MetadataTokenTTLHeader))
	if err != nil || ttl < 1 || ttl > 21600 {
		http.Error(w, "invalid "+MetadataTokenTTLHeader, http.StatusBadRequest)
		return
	}
	tok := crand.Text()
	s.mu.Lock()
	s.mdTokens[tok] = s.now().Add(time.Duration(ttl) * time.Second)
	s.mu.Unlock()
	fmt.Fprint(w, tok)
}

func (s *Server) tokenOK(r *http.Request) bool {
	tok := r.Header.Get(MetadataTokenHeader)
	if tok == "" {
		return !s.cfg.MetadataRequireToken
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.mdTokens[tok]
	return ok && s.now().Before(exp)
}

// metadataValue renders one metadata key for an instance.
func (s *Server) metadataValue(inst, key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.m.instances[inst]
	prim := s.m.enis[in.PrimaryENI]
	v := s.m.vsw[in.VSwitchID]
	switch key {
	case "":
		return strings.Join([]string{"instance-id", "region-id", "zone-id", "instance/", "mac", "vpc-id", "vpc-cidr-block",
			"vswitch-id", "vswitch-cidr-block", "private-ipv4", "hostname", "owner-account-id", "image-id", "serial-number",
			"network-type", "network/", "ram/"}, "\n"), true
	case "instance-id":
		return in.ID, true
	case "network-type":
		// Only instances in VPCs have metadata ("Instance metadata
		// items": network-type, "vpc").
		return "vpc", true
	case "image-id":
		return simImageID, true
	case "serial-number":
		return serialOf(in.ID), true
	case "region-id":
		return s.m.region, true
	case "zone-id":
		return in.ZoneID, true
	case "instance/", "instance":
		return "instance-type", true
	case "instance/instance-type":
		return in.InstanceType, true
	case "mac":
		return prim.MAC, true
	case "vpc-id":
		return s.m.vpcID, true
	case "vpc-cidr-block":
		return s.m.vpcCIDR.String(), true
	case "vswitch-id":
		return v.ID, true
	case "vswitch-cidr-block":
		return v.CIDR.String(), true
	case "private-ipv4":
		return prim.PrimaryIP.String(), true
	case "owner-account-id":
		return ownerAccountID, true
	case "hostname":
		return strings.TrimPrefix(in.ID, "i-"), true
	case "network/", "network":
		return "interfaces/", true
	case "network/interfaces/", "network/interfaces":
		return "macs/", true
	case "network/interfaces/macs/", "network/interfaces/macs":
		var lines []string
		for _, e := range s.visibleENIsLocked(inst) {
			lines = append(lines, e.MAC+"/")
		}
		return strings.Join(lines, "\n"), true
	case "ram/", "ram":
		return "security-credentials/", true
	case "ram/security-credentials/", "ram/security-credentials":
		return s.cfg.RAMRole, true
	case "ram/security-credentials/" + s.cfg.RAMRole:
		return s.ramCredentialsLocked(), true
	}
	if rest, ok := strings.CutPrefix(key, "network/interfaces/macs/"); ok {
		mac, field, _ := strings.Cut(rest, "/")
		for _, e := range s.visibleENIsLocked(inst) {
			if e.MAC == mac {
				return s.macValueLocked(e, field)
			}
		}
	}
	return "", false
}

// simImageID is the image every simulated instance runs.
const simImageID = "aliyun_3_x64_20G_sim_20260101.vhd"

// serialOf is an instance's serial number: a UUID-shaped value derived
// from its ID, stable across restarts.
func serialOf(instanceID string) string {
	h := sha256.Sum256([]byte(instanceID))
	x := hex.EncodeToString(h[:16])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// dynamicValue renders one key under /latest/dynamic/: the instance
// identity document ("Instance metadata items", dynamic items: zone-id,
// serial-number, instance-id, region-id, private-ipv4, owner-account-id,
// mac, image-id, instance-type). Its signature (pkcs7) is not modelled.
func (s *Server) dynamicValue(inst, key string) (string, bool) {
	switch key {
	case "":
		return "instance-identity/", true
	case "instance-identity", "instance-identity/":
		return "document", true
	case "instance-identity/document":
		// rendered below
	default:
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.m.instances[inst]
	prim := s.m.enis[in.PrimaryENI]
	b, err := json.Marshal(map[string]string{
		"zone-id": in.ZoneID, "serial-number": serialOf(in.ID), "instance-id": in.ID, "region-id": s.m.region,
		"private-ipv4": prim.PrimaryIP.String(), "owner-account-id": ownerAccountID, "mac": prim.MAC,
		"image-id": simImageID, "instance-type": in.InstanceType,
	})
	return string(b), err == nil
}

// visibleENIsLocked lists the instance's ENIs the metadata service shows:
// InUse for at least MetadataLag, by device index.
func (s *Server) visibleENIsLocked(inst string) []*ENIState {
	now := s.now()
	var out []*ENIState
	for _, e := range s.m.attached(inst) {
		if e.Status == "InUse" && !now.Before(e.InUseAt.Add(s.cfg.MetadataLag)) {
			out = append(out, e)
		}
	}
	return out
}

func (s *Server) macValueLocked(e *ENIState, field string) (string, bool) {
	v := s.m.vsw[e.VSwitchID]
	switch field {
	case "":
		return strings.Join([]string{"network-interface-id", "primary-ip-address", "private-ipv4s", "ipv6s", "gateway",
			"ipv6-gateway", "netmask", "vswitch-id", "vpc-id", "vpc-cidr-block", "vswitch-cidr-block", "vswitch-ipv6-cidr-block"}, "\n"), true
	case "network-interface-id":
		return e.ID, true
	case "primary-ip-address":
		return e.PrimaryIP.String(), true
	case "private-ipv4s":
		all := append([]string{e.PrimaryIP.String()}, strs(e.IPv4)...)
		b, err := json.Marshal(all)
		return string(b), err == nil
	case "ipv6s":
		if len(e.IPv6) == 0 {
			return "", false
		}
		return "[" + strings.Join(strs(e.IPv6), ",") + "]", true
	case "gateway":
		return gatewayOf(v.CIDR).String(), true
	case "ipv6-gateway":
		if !v.IPv6CIDR.IsValid() {
			return "", false
		}
		return ipv6Gateway(v.IPv6CIDR).String(), true
	case "netmask":
		return net.IP(net.CIDRMask(v.CIDR.Bits(), 32)).String(), true
	case "vswitch-id":
		return v.ID, true
	case "vpc-id":
		return e.VPCID, true
	case "vswitch-cidr-block":
		return v.CIDR.String(), true
	case "vpc-cidr-block":
		return s.m.vpcCIDR.String(), true
	case "vswitch-ipv6-cidr-block":
		if !v.IPv6CIDR.IsValid() {
			return "", false
		}
		return v.IPv6CIDR.String(), true
	}
	return "", false
}

// ipv6Gateway is the simulator's IPv6 gateway of a vSwitch: the address at
// index -3 of its IPv6 CIDR, by analogy with IPv4.
func ipv6Gateway(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As16()
	host := 128 - p.Bits()
	for i := 15; i >= 0 && host > 0; i-- {
		n := min(host, 8)
		b[i] |= byte(1<<n - 1)
		host -= n
	}
	b[15] -= 2
	return netip.AddrFrom16(b)
}

// ramCredentialsLocked returns the RAM-role credentials document, minting
// a new STS key (accepted by the API) when the current one is old.
func (s *Server) ramCredentialsLocked() string {
	now := s.now()
	var id string
	var cred credential
	for k, c := range s.keys {
		if c.token != "" && c.expires.Sub(now) > ramCredentialTTL/3 {
			if id == "" || k < id {
				id, cred = k, c
			}
		}
	}
	if id == "" {
		id = "STS.sim" + strings.ToLower(crand.Text()[:16])
		cred = credential{secret: crand.Text(), token: "simtoken-" + crand.Text(), expires: now.Add(ramCredentialTTL)}
		s.keys[id] = cred
	}
	b, err := json.Marshal(map[string]string{
		"AccessKeyId": id, "AccessKeySecret": cred.secret, "SecurityToken": cred.token,
		"Expiration": cred.expires.UTC().Format(timeFormat), "LastUpdated": now.UTC().Format(timeFormat), "Code": "Success",
	})
	if err != nil {
		return "{}"
	}
	return string(b)
}

// callerInstance is the instance a metadata request without an instance
// in its path is about: the one whose primary ENI's address is the
// request's source, else the only instance ("" if neither).
func (s *Server) callerInstance(remote string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		src := ap.Addr().Unmap()
		for id, in := range s.m.instances {
			if e := s.m.enis[in.PrimaryENI]; e != nil && e.PrimaryIP == src {
				return id
			}
		}
	}
	if len(s.m.instances) == 1 {
		for id := range s.m.instances {
			return id
		}
	}
	return ""
}
