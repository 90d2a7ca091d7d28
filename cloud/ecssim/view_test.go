package ecssim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"
)

// TestDescribeFilteredMatchesScan walks random sequences of operations
// (create, attach, detach, delete, address changes, instances added and
// released, their transitions completed at random steps, the clock moving
// through stale-read windows) and checks after each step that every
// describe filtered by InstanceId, NetworkInterfaceId.N or InstanceIds
// answers byte for byte what a scan of every ENI of the account, with the
// stale records applied, answers.
func TestDescribeFilteredMatchesScan(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { walkDescribes(t, seed, 400) })
	}
}

func walkDescribes(t *testing.T, seed uint64, steps int) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Config{
		Zones:     []string{"cn-hangzhou-h"},
		VSwitches: []VSwitchConfig{{ID: "vsw-a", Zone: "cn-hangzhou-h", CIDR: netip.MustParsePrefix("192.168.0.0/22")}},
		Clock:     func() time.Time { return now },
		// Transitions complete only when the walk completes them: no
		// timer fires during the test.
		Delays:     Delays{Attach: time.Hour, Detach: time.Hour, Delete: time.Hour},
		StaleReads: 3 * time.Second,
		MaxENIs:    150,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 7))
	var insts, enis []string // every ID ever seen, gone ones included
	addInstance := func() {
		in, err := s.AddInstance(InstanceSpec{InstanceType: "ecs.g7.4xlarge"})
		if err != nil {
			t.Fatal(err)
		}
		insts, enis = append(insts, in.ID), append(enis, in.PrimaryENI)
	}
	for range 4 {
		addInstance()
	}
	pick := func(ids []string) string { return ids[rng.IntN(len(ids))] }
	// pickENI picks, most of the time, a secondary ENI in status, so that
	// most operations take effect; else any ENI ever seen.
	pickENI := func(status string) string {
		s.mu.Lock()
		defer s.mu.Unlock()
		var in []string
		for id, e := range s.m.enis {
			if e.Status == status && e.Type != "Primary" {
				in = append(in, id)
			}
		}
		if len(in) == 0 || rng.IntN(4) == 0 {
			return pick(enis)
		}
		slices.Sort(in)
		return pick(in)
	}
	done := map[string]int{} // operations that took effect, by action
	// do calls an action; refusals (an ENI in the wrong state, a limit)
	// are part of the walk.
	do := func(action string, kv ...string) {
		p := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			p.Set(kv[i], kv[i+1])
		}
		h, _ := s.actions(ECSVersion, action)
		o, err := h(call{action: action, p: p})
		if err != nil {
			return
		}
		done[action]++
		if action == "CreateNetworkInterface" {
			enis = append(enis, o["NetworkInterfaceId"].(string))
		}
	}
	finish := func(name string, fn func(string), from, to string) {
		id := pickENI(from)
		fn(id)
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.m.enis[id]; e != nil && e.Status == to || e == nil && to == "" {
			done[name]++
		}
	}
	shifted := 0 // steps where a stale record shows an ENI on another instance than it is now
	for step := range steps {
		switch op := rng.IntN(15); {
		case op < 2:
			do("CreateNetworkInterface", "VSwitchId", "vsw-a", "SecurityGroupId", DefaultSecurityGroup,
				"DeleteOnRelease", strconv.FormatBool(rng.IntN(2) == 0))
		case op < 4:
			do("AttachNetworkInterface", "NetworkInterfaceId", pickENI("Available"), "InstanceId", pick(insts))
		case op < 6:
			do("DetachNetworkInterface", "NetworkInterfaceId", pickENI("InUse"))
		case op < 7:
			do("DeleteNetworkInterface", "NetworkInterfaceId", pickENI("Available"))
		case op < 8:
			do("AssignPrivateIpAddresses", "NetworkInterfaceId", pickENI("InUse"), "SecondaryPrivateIpAddressCount", "1")
		case op < 9:
			finish("finishAttach", s.finishAttach, "Attaching", "InUse")
		case op < 10:
			finish("finishDetach", s.finishDetach, "Detaching", "Available")
		case op < 11:
			finish("finishDelete", s.finishDelete, "Deleting", "")
		case op < 12:
			if _, _, err := s.ReleaseInstance(pick(insts)); err == nil {
				done["ReleaseInstance"]++
			}
			if len(insts) < 30 {
				addInstance()
			}
		default:
			now = now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
		}
		if err := s.Check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		scan := scanView(s)
		if showsElsewhere(s, scan) {
			shifted++
		}
		queries := []url.Values{{}, {"InstanceId": {"i-missing"}}}
		for _, in := range insts {
			queries = append(queries, url.Values{"InstanceId": {in}})
		}
		named := append(slices.Clone(enis), "eni-missing")
		for range 5 {
			q := url.Values{}
			for n := range 1 + rng.IntN(5) {
				q.Set("NetworkInterfaceId."+strconv.Itoa(n+1), pick(named))
			}
			if rng.IntN(2) == 0 {
				q.Set("InstanceId", pick(insts))
			}
			queries = append(queries, q)
		}
		for _, q := range queries {
			q.Set("MaxResults", "500")
			got, err := s.describeNetworkInterfaces(call{action: "DescribeNetworkInterfaces", p: q})
			if err != nil {
				t.Fatalf("step %d: describe %v: %v", step, q, err)
			}
			if g, w := mustJSON(t, got), mustJSON(t, wantENIs(scan, q)); g != w {
				t.Fatalf("step %d: describe %v:\ngot  %s\nwant %s", step, q, g, w)
			}
		}
		for _, ids := range [][]string{nil, {pick(insts)}, {pick(insts), pick(insts), "i-missing"}} {
			q := url.Values{"MaxResults": {"100"}}
			if ids != nil {
				q.Set("InstanceIds", mustJSON(t, ids))
			}
			got, err := s.describeInstances(call{action: "DescribeInstances", p: q})
			if err != nil {
				t.Fatalf("step %d: describe instances %v: %v", step, ids, err)
			}
			if g, w := mustJSON(t, got), mustJSON(t, wantInstances(s, scan, ids)); g != w {
				t.Fatalf("step %d: describe instances %v:\ngot  %s\nwant %s", step, ids, g, w)
			}
		}
	}
	t.Logf("took effect: %v; a stale record showed an ENI on another instance in %d steps", done, shifted)
	for _, a := range []string{"CreateNetworkInterface", "AttachNetworkInterface", "DetachNetworkInterface", "DeleteNetworkInterface",
		"AssignPrivateIpAddresses", "finishAttach", "finishDetach", "finishDelete", "ReleaseInstance"} {
		if done[a] < steps/100 {
			t.Errorf("%s took effect %d times in %d steps (%v): the walk explores little", a, done[a], steps, done)
		}
	}
	if shifted < steps/20 {
		t.Errorf("a stale record showed an ENI on another instance in only %d of %d steps: the walk explores little", shifted, steps)
	}
}

// scanView is what reads see, found the simple way: every ENI of the
// account, each shadowed by its stale record while the record lasts (a
// record without prev hides the ENI), sorted by ID. It leaves expired
// records in place.
func scanView(s *Server) []*ENIState {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []*ENIState
	for id, e := range s.m.enis {
		if rec, ok := s.stale[id]; !ok || !now.Before(rec.until) {
			out = append(out, e)
		}
	}
	for _, rec := range s.stale {
		if now.Before(rec.until) && rec.prev != nil {
			out = append(out, rec.prev)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// showsElsewhere reports whether scan shows an ENI on another instance
// (or on none) than the one it is on now.
func showsElsewhere(s *Server, scan []*ENIState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range scan {
		if live := s.m.enis[e.ID]; live != nil && live.InstanceID != e.InstanceID {
			return true
		}
	}
	return false
}

// wantENIs is DescribeNetworkInterfaces' answer to q (one page) over scan.
func wantENIs(scan []*ENIState, q url.Values) obj {
	ids := list(q, "NetworkInterfaceId")
	items := []obj{}
	for _, e := range scan {
		if (len(ids) == 0 || slices.Contains(ids, e.ID)) && (q.Get("InstanceId") == "" || e.InstanceID == q.Get("InstanceId")) {
			items = append(items, renderENI(e))
		}
	}
	return obj{"TotalCount": len(items), "NextToken": "", "NetworkInterfaceSets": obj{"NetworkInterfaceSet": items}}
}

// wantInstances is DescribeInstances' answer (one page) for ids (nil:
// all) over scan.
func wantInstances(s *Server, scan []*ENIState, ids []string) obj {
	s.mu.Lock()
	defer s.mu.Unlock()
	items := []obj{}
	for _, in := range s.m.instanceList(nil) {
		if ids == nil || slices.Contains(ids, in.ID) {
			items = append(items, s.renderInstanceLocked(in, scan))
		}
	}
	return obj{"TotalCount": len(items), "NextToken": "", "Instances": obj{"Instance": items}}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
