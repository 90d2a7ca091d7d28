package simulation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
)

// transport carries one agent incarnation's cloud calls to the simulated
// cloud in-process: the real SDK encodes, signs and decodes each call as
// over HTTP, but no socket is opened. A call parks until the world
// releases it (world.releaseCall): calls made in one step by goroutines
// scheduled in any order reach the cloud in the order of their content,
// so the cloud's answers, and its random draws, do not depend on the
// scheduler.
type transport struct {
	w   *world
	inc *incarnation
}

// call is a parked cloud call.
type call struct {
	node *node
	// order is the call's place among the calls parked at the same
	// instant: the node, then the canonical request.
	order string
	// seq breaks ties between identical requests (in arrival order; the
	// two are interchangeable).
	seq uint64
	// index is the call's place in world.parked (-1: not parked).
	index int
	go_   chan struct{}
	form  url.Values
}

// mutations are the actions that change an ENI: the ones the protected
// ENIs (primary, foreign) must never see.
var mutations = map[string]bool{
	"AttachNetworkInterface": true, "DetachNetworkInterface": true, "DeleteNetworkInterface": true,
	"AssignPrivateIpAddresses": true, "UnassignPrivateIpAddresses": true,
	"AssignIpv6Addresses": true, "UnassignIpv6Addresses": true,
	"ModifyNetworkInterfaceAttribute": true,
}

// errKilled answers the calls of a killed incarnation: nothing of it
// reaches the cloud after the kill.
var errKilled = errors.New("simulation: the agent was killed")

// RoundTrip parks the request, then serves it with the simulator's handler.
func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.inc.dead.Load() {
		return nil, errKilled
	}
	form, body, err := requestForm(r)
	if err != nil {
		return nil, err
	}
	c := &call{node: t.inc.node, form: form, go_: make(chan struct{}),
		order: fmt.Sprintf("%08d %s", t.inc.node.idx, canonical(form))}
	t.w.park(c)
	select {
	case <-c.go_:
	case <-r.Context().Done():
		t.w.unpark(c)
		return nil, r.Context().Err()
	}
	if t.inc.dead.Load() {
		return nil, errKilled
	}
	action, eni := form.Get("Action"), form.Get("NetworkInterfaceId")
	if mutations[action] && t.w.protected[eni] != "" {
		t.w.violate("node %s: %s on %s ENI %s", t.inc.node.name, action, t.w.protected[eni], eni)
	}
	r2 := r.Clone(context.WithoutCancel(r.Context()))
	r2.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	t.w.handler.ServeHTTP(rec, r2)
	t.w.noteCall(t.inc.node, action, eni, rec)
	if action == "AttachNetworkInterface" && rec.Code == http.StatusOK {
		t.w.attachAnswered(t.inc.node)
	}
	t.w.touch(t.inc.node)
	return rec.Result(), nil
}

// requestForm reads the request's parameters (query and form body) and
// returns the body to send on.
func requestForm(r *http.Request) (url.Values, []byte, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, nil, err
		}
		r.Body.Close()
		body = b
	}
	form := url.Values{}
	for k, v := range r.URL.Query() {
		form[k] = v
	}
	if len(body) > 0 {
		bf, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, nil, fmt.Errorf("simulation: request body: %w", err)
		}
		for k, v := range bf {
			form[k] = append(form[k], v...)
		}
	}
	return form, body, nil
}

// unordered are the parameters the SDK draws from the wall clock or a
// random source: they must not order the calls.
var unordered = []string{"Signature", "SignatureNonce", "Timestamp"}

// canonical is the request's parameters, sorted, without the ones drawn
// from the wall clock or at random.
func canonical(form url.Values) string {
	keys := make([]string, 0, len(form))
	for k := range form {
		if !slices.Contains(unordered, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.Join(form[k], ","))
		b.WriteByte('&')
	}
	return b.String()
}
