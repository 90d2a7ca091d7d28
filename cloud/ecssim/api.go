package ecssim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// API versions the simulator speaks.
const (
	ECSVersion = "2014-05-26"
	VPCVersion = "2016-04-28"
)

// obj is a JSON object of a response.
type obj = map[string]any

// call is one decoded API request.
type call struct {
	action string
	p      url.Values
}

// handler answers one action. It returns the response object (RequestId is
// added) or an error.
type handler func(c call) (obj, error)

// actions maps version and action to handlers; mutating ones honour
// ClientToken.
func (s *Server) actions(version, action string) (h handler, idempotent bool) {
	if version == VPCVersion {
		if action == "DescribeVSwitches" {
			return s.describeVSwitches, false
		}
		return nil, false
	}
	if version != ECSVersion {
		return nil, false
	}
	switch action {
	case "DescribeInstances":
		return s.describeInstances, false
	case "DescribeInstanceTypes":
		return s.describeInstanceTypes, false
	case "DescribeNetworkInterfaces":
		return s.describeNetworkInterfaces, false
	case "DescribeVSwitches":
		return s.describeVSwitches, false
	case "CreateNetworkInterface":
		return s.createNetworkInterface, true
	case "AttachNetworkInterface":
		return s.attachNetworkInterface, false
	case "DetachNetworkInterface":
		return s.detachNetworkInterface, false
	case "DeleteNetworkInterface":
		return s.deleteNetworkInterface, false
	case "AssignPrivateIpAddresses":
		return s.assignPrivateIPs, true
	case "UnassignPrivateIpAddresses":
		return s.unassignPrivateIPs, false
	case "AssignIpv6Addresses":
		return s.assignIPv6, true
	case "UnassignIpv6Addresses":
		return s.unassignIPv6, false
	case "ModifyNetworkInterfaceAttribute":
		return s.modifyNetworkInterfaceAttribute, false
	}
	return nil, false
}

// Handler serves the ECS and VPC RPC APIs at / and the control API under
// /_sim/.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/_sim/", s.serveControl)
	mux.HandleFunc("/", s.serveAPI)
	return mux
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	reqID := s.requestID()
	if err := r.ParseForm(); err != nil {
		s.writeErr(w, r, reqID, "", apiErr("InvalidParameter", "The request cannot be parsed: %v.", err))
		return
	}
	p := r.Form
	action := p.Get("Action")
	h, idem := s.actions(p.Get("Version"), action)
	if err := s.authenticate(r.Method, p); err != nil {
		s.writeErr(w, r, reqID, action, err)
		return
	}
	c := call{action: action, p: p}
	token := p.Get("ClientToken")
	tokened := idem && token != ""
	s.mu.Lock()
	delay, ferr := s.admitLocked(action)
	s.mu.Unlock()
	if ferr != nil {
		s.sleep(r.Context(), delay)
		if tokened && burnsToken(ferr) {
			// A scripted answer stands in for the service's own: a token
			// whose request failed so is burnt like any other.
			s.burnToken(c, token, ferr)
		}
		s.writeErr(w, r, reqID, action, ferr)
		return
	}
	if h == nil {
		s.sleep(r.Context(), delay)
		s.writeErr(w, r, reqID, action, apiErr("InvalidAction.NotFound", "Specified api %q of version %q is not found.", action, p.Get("Version")))
		return
	}
	if tokened {
		if err := checkClientToken(token); err != nil {
			s.writeErr(w, r, reqID, action, err)
			return
		}
	}
	// A mutation holds its ENI and instance from admission to answer, its
	// latency included: another mutation of either meanwhile is refused
	// with OperationConflict (Settings.Conflicts).
	release, cerr := s.hold(c)
	if cerr != nil {
		s.sleep(r.Context(), delay)
		s.writeErr(w, r, reqID, action, cerr)
		return
	}
	defer release()
	if tokened {
		s.serveIdempotent(w, r, reqID, c, h, token, delay)
		return
	}
	s.sleep(r.Context(), delay)
	out, err := h(c)
	if err != nil {
		s.writeErr(w, r, reqID, action, err)
		return
	}
	out["RequestId"] = reqID
	s.writeJSON(w, reqID, action, http.StatusOK, out)
}

// hold marks the ENI and instance a mutating call names as busy until the
// returned func runs, or answers OperationConflict when one of them is
// busy already. It does nothing unless Settings.Conflicts is on: the fast
// profile lets concurrent calls on one ENI through, one after the other.
func (s *Server) hold(c call) (func(), *apiError) {
	if strings.HasPrefix(c.action, "Describe") {
		return func() {}, nil
	}
	var keys []string
	if id := c.p.Get("NetworkInterfaceId"); id != "" {
		keys = append(keys, "eni/"+id)
	}
	if id := c.p.Get("InstanceId"); id != "" {
		keys = append(keys, "instance/"+id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.run.Conflicts || len(keys) == 0 {
		return func() {}, nil
	}
	for _, k := range keys {
		if s.busy[k] {
			return nil, apiErr("OperationConflict", "%s", defaultMessage("OperationConflict"))
		}
	}
	for _, k := range keys {
		s.busy[k] = true
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, k := range keys {
			delete(s.busy, k)
		}
	}, nil
}

// burnToken records that the call with token failed with e (unless the
// token has a record already): a resend answers IdempotentFailed.
func (s *Server) burnToken(c call, token string, e *apiError) {
	key := c.action + "\x00" + token
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, seen := s.tokens[key]; !seen {
		s.tokens[key] = tokenRecord{params: canonicalParams(c.p), failed: e.Code}
	}
}

// serveIdempotent answers a call carrying a ClientToken, as ECS does:
//   - the same token with the same parameters gets the first successful
//     answer again without a new effect;
//   - a token whose first request failed with a non-5xx error (burnsToken)
//     is burnt: a resend answers IdempotentFailed, whatever changed since;
//   - other parameters get IdempotentParameterMismatch;
//   - a resend while the first request is still being processed (its
//     latency included) gets IdempotentProcessing.
//
// A 5xx is not remembered: the token may be used again. The token is
// reserved before the call's latency, so two concurrent resends cannot
// both take effect.
func (s *Server) serveIdempotent(w http.ResponseWriter, r *http.Request, reqID string, c call, h handler, token string, delay time.Duration) {
	key := c.action + "\x00" + token
	params := canonicalParams(c.p)
	s.mu.Lock()
	rec, seen := s.tokens[key]
	if !seen {
		// Reserve the token: a concurrent resend sees it in flight.
		s.tokens[key] = tokenRecord{params: params}
	}
	s.mu.Unlock()
	if seen {
		s.sleep(r.Context(), delay)
		switch {
		case rec.params != params:
			s.writeErr(w, r, reqID, c.action, apiErr("IdempotentParameterMismatch", "The request uses the ClientToken %q of a previous request with other parameters.", token))
		case rec.failed != "":
			s.writeErr(w, r, reqID, c.action, apiErr("IdempotentFailed", "The previous request with ClientToken %q failed (%s); use another ClientToken.", token, rec.failed))
		case rec.body == nil:
			s.writeErr(w, r, reqID, c.action, apiErr("IdempotentProcessing", "A request with ClientToken %q is being processed.", token))
		default:
			s.count(c.action, "ok")
			w.Header().Set("Content-Type", "application/json;charset=utf-8")
			w.WriteHeader(http.StatusOK)
			w.Write(rec.body) // the client may be gone; nothing to do then
		}
		return
	}
	s.sleep(r.Context(), delay)
	out, err := h(c)
	if err != nil {
		s.mu.Lock()
		if ae, ok := err.(*apiError); ok && burnsToken(ae) {
			s.tokens[key] = tokenRecord{params: params, failed: ae.Code}
		} else {
			delete(s.tokens, key)
		}
		s.mu.Unlock()
		s.writeErr(w, r, reqID, c.action, err)
		return
	}
	out["RequestId"] = reqID
	body, merr := json.Marshal(out)
	if merr != nil {
		s.writeErr(w, r, reqID, c.action, apiErr("InternalError", "marshal: %v", merr))
		return
	}
	s.mu.Lock()
	s.tokens[key] = tokenRecord{params: params, body: body}
	s.mu.Unlock()
	s.count(c.action, "ok")
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.Write(body) // the client may be gone; nothing to do then
}

// commonParam reports whether k is a common parameter, not part of what
// ClientToken idempotency compares.
func commonParam(k string) bool {
	switch k {
	case "Signature", "SignatureNonce", "Timestamp", "AccessKeyId", "SignatureMethod", "SignatureVersion",
		"SignatureType", "SecurityToken", "Format", "Version", "RegionId":
		return true
	}
	return false
}

func canonicalParams(p url.Values) string {
	var parts []string
	for k, vs := range p {
		if commonParam(k) {
			continue
		}
		parts = append(parts, k+"="+strings.Join(vs, ","))
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}

// authenticate checks the access key and the signature v1.
func (s *Server) authenticate(method string, p url.Values) *apiError {
	id := p.Get("AccessKeyId")
	s.mu.Lock()
	cred, ok := s.keys[id]
	now := s.now()
	s.mu.Unlock()
	if !ok {
		return apiErr("InvalidAccessKeyId.NotFound", "Specified access key is not found.")
	}
	if !signatureOK(method, p, cred.secret, p.Get("Signature")) {
		return apiErr("SignatureDoesNotMatch", "Specified signature is not matched with our calculation. server string to sign is:%s", stringToSign(method, p))
	}
	if e := s.useNonce(p.Get("SignatureNonce"), id, now); e != nil {
		return e
	}
	if cred.token != "" {
		if p.Get("SecurityToken") != cred.token {
			return apiErr("InvalidSecurityToken.Mismatch", "The security token does not match the access key.")
		}
		if now.After(cred.expires) {
			return apiErr("InvalidSecurityToken.Expired", "Specified SecurityToken is expired.")
		}
	}
	return nil
}

// nonceWindow is how long a SignatureNonce may not be used again.
const nonceWindow = 15 * time.Minute

// useNonce refuses a SignatureNonce seen within nonceWindow, so that a
// replayed signed request (or a client resending instead of re-signing)
// fails as on the real API.
func (s *Server) useNonce(nonce, keyID string, now time.Time) *apiError {
	if nonce == "" {
		return apiErr("MissingParameter", "The input parameter \"SignatureNonce\" that is mandatory for processing this request is not supplied.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := keyID + "\x00" + nonce
	if t, ok := s.nonces[key]; ok && now.Sub(t) < nonceWindow {
		return apiErr("SignatureNonceUsed", "Specified signature nonce was used already.")
	}
	// Forget the uses older than the window, oldest first: each is
	// forgotten once, so a call costs the same however many calls the last
	// window saw (a walk of every nonce cost a millisecond per call at
	// 40,000). A clock set back only keeps some a while longer.
	for len(s.nonceQ) > 0 && now.Sub(s.nonceQ[0].at) >= nonceWindow {
		if old := s.nonceQ[0]; s.nonces[old.key].Equal(old.at) {
			delete(s.nonces, old.key)
		}
		s.nonceQ = s.nonceQ[1:]
	}
	s.nonces[key] = now
	s.nonceQ = append(s.nonceQ, nonceUse{key: key, at: now})
	return nil
}

func (s *Server) requestID() string {
	s.mu.Lock()
	s.seqReq++
	n := s.seqReq
	s.mu.Unlock()
	return fmt.Sprintf("5151A1D0-0000-4000-8000-%012X", n)
}

func (s *Server) writeJSON(w http.ResponseWriter, reqID, action string, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = fmt.Appendf(nil, `{"RequestId":%q,"Code":"InternalError","Message":"marshal failed"}`, reqID)
	}
	if status == http.StatusOK {
		s.count(action, "ok")
	}
	s.log.Debug("ecssim: call", "action", action, "status", status, "request", reqID)
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	w.WriteHeader(status)
	w.Write(b) // the client may be gone; nothing to do then
}

func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, reqID, action string, err error) {
	ae, ok := err.(*apiError)
	if !ok {
		ae = apiErr("InternalError", "%v", err)
	}
	if action == "" {
		action = "(none)"
	}
	s.count(action, ae.Code)
	s.writeJSON(w, reqID, action, ae.Status, map[string]string{
		"RequestId": reqID, "HostId": r.Host, "Code": ae.Code, "Message": ae.Message,
		"Recommend": "https://api.aliyun.com/troubleshoot?q=" + ae.Code,
	})
}

// Parameter helpers.

// list returns name.1, name.2, ... until the first absent index.
func list(p url.Values, name string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := p[name+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// tags returns Tag.N.Key / Tag.N.Value pairs.
func tags(p url.Values) (map[string]string, error) {
	out := map[string]string{}
	for i := 1; ; i++ {
		k, ok := p["Tag."+strconv.Itoa(i)+".Key"]
		if !ok {
			if len(out) > 20 {
				return nil, apiErr("InvalidParameter", "At most 20 tags are allowed.")
			}
			return out, nil
		}
		if k[0] == "" {
			return nil, apiErr("InvalidParameter", "Tag.%d.Key is empty.", i)
		}
		out[k[0]] = p.Get("Tag." + strconv.Itoa(i) + ".Value")
	}
}

// intParam parses an optional integer parameter within [lo, hi].
func intParam(p url.Values, name string, def, lo, hi int) (int, error) {
	v := p.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, apiErr("InvalidParameter", "The parameter %s=%q must be an integer from %d to %d.", name, v, lo, hi)
	}
	return n, nil
}

func required(p url.Values, name string) (string, error) {
	v := p.Get(name)
	if v == "" {
		return "", apiErr("MissingParameter", "The input parameter %q that is mandatory for processing this request is not supplied.", name)
	}
	return v, nil
}
