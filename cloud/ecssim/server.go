package ecssim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Server is a running simulator: the model, the ECS/VPC API handler, the
// metadata handler and the control API. All methods are safe for
// concurrent use.
type Server struct {
	cfg Config // defaults applied; never changed after New
	log *slog.Logger
	now func() time.Time

	// mu guards everything below down to the lifecycle fields.
	mu       sync.Mutex
	m        *model
	stale    map[string]staleENI    // ENI id -> what reads still show
	tokens   map[string]tokenRecord // action + ClientToken -> first answer
	busy     map[string]bool        // "eni/<id>", "instance/<id>" a mutation holds (Settings.Conflicts)
	keys     map[string]credential  // access key id -> secret (+ STS token)
	hooks    Hooks
	run      Settings // faults, latency, rate limit: settable at run time (SetSettings)
	oneShot  []Fault
	bucket   bucket
	rng      *rand.Rand
	counters map[string]map[string]int
	mdTokens map[string]time.Time // metadata token -> expiry
	nonces   map[string]time.Time // access key + SignatureNonce -> first use
	nonceQ   []nonceUse           // the uses in nonces, oldest first, to forget them
	// seqReq numbers request IDs.
	seqReq uint64

	// Lifecycle: transitions run on goroutines owned by the Server; Close
	// closes done and waits for them (wg) and for the HTTP servers.
	bgMu   sync.Mutex // guards closed, and wg.Add against Close
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
	srvs   []*http.Server
	ecsLn  net.Listener
	mdLn   net.Listener
}

// credential is an accepted access key.
type credential struct {
	secret  string
	token   string    // STS security token ("" for a plain key)
	expires time.Time // zero for a plain key
}

// nonceUse is the first use of a SignatureNonce (key as in Server.nonces).
type nonceUse struct {
	key string
	at  time.Time
}

// staleENI is what reads show for an ENI during the stale window after a
// mutation: prev is the ENI before the mutation (nil: it did not exist).
type staleENI struct {
	prev  *ENIState
	until time.Time
}

// tokenRecord is the first answer to a call with a ClientToken: its
// parameters, and either the successful body, or the code of the non-5xx
// error that burnt the token, or neither while the call is in flight.
type tokenRecord struct {
	params string
	body   []byte
	failed string
}

// New builds a simulator from cfg, loading cfg.StateFile if it exists.
// It serves nothing until Start (or use Handler and MetadataHandler).
func New(cfg Config) (*Server, error) {
	if err := applyDefaults(&cfg); err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: cfg.Logger, now: cfg.Clock,
		stale: map[string]staleENI{}, tokens: map[string]tokenRecord{}, busy: map[string]bool{}, keys: map[string]credential{},
		run: Settings{Faults: cfg.Faults, Latency: cfg.Latency, AccountRateLimit: cfg.AccountRateLimit, StaleReads: cfg.StaleReads,
			Conflicts: cfg.Conflicts, MetadataFaults: cfg.MetadataFaults},
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		counters: map[string]map[string]int{}, mdTokens: map[string]time.Time{}, nonces: map[string]time.Time{},
		done: make(chan struct{}),
	}
	s.bucket.set(cfg.AccountRateLimit, s.now())
	for id, sec := range cfg.AccessKeys {
		s.keys[id] = credential{secret: sec}
	}
	vpc, err := netip.ParsePrefix(cfg.VPCCIDR)
	if err != nil {
		return nil, fmt.Errorf("vpc cidr %q: %w", cfg.VPCCIDR, err)
	}
	s.m = &model{region: cfg.Region, vpcID: cfg.VPCID, vpcCIDR: vpc.Masked(), types: instanceTypes(),
		sgs: map[string]bool{}, instances: map[string]*InstanceState{}, enis: map[string]*ENIState{},
		byInstance: map[string]map[string]*ENIState{}, byTag: map[string]map[string]*ENIState{}, vsw: map[string]*VSwitchState{}, pools: map[string]*pool{}, maxENIs: cfg.MaxENIs}
	for _, sg := range cfg.SecurityGroups {
		s.m.sgs[sg] = true
	}
	loaded, err := s.load()
	if err != nil {
		return nil, err
	}
	if !loaded {
		for _, v := range cfg.VSwitches {
			if err := s.m.addVSwitch(v); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func applyDefaults(c *Config) error {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.VPCID == "" {
		c.VPCID = DefaultVPCID
	}
	if c.VPCCIDR == "" {
		c.VPCCIDR = DefaultVPCCIDR
	}
	if len(c.Zones) == 0 {
		c.Zones = []string{c.Region + "-h", c.Region + "-i"}
	}
	if len(c.VSwitches) == 0 {
		for i, z := range c.Zones {
			c.VSwitches = append(c.VSwitches, VSwitchConfig{
				ID: fmt.Sprintf("vsw-sim-%s", strings.TrimPrefix(z, c.Region+"-")), Zone: z,
				CIDR:     netip.MustParsePrefix(fmt.Sprintf("192.168.%d.0/24", i)),
				IPv6CIDR: netip.MustParsePrefix(fmt.Sprintf("2408:4005:300:%x::/64", i)),
			})
		}
		if c.VPCCIDR != DefaultVPCCIDR {
			return errors.New("config: a vpc cidr other than the default needs explicit vswitches")
		}
	}
	zones := map[string]bool{}
	for _, z := range c.Zones {
		zones[z] = true
	}
	for _, v := range c.VSwitches {
		if !zones[v.Zone] {
			return fmt.Errorf("config: vswitch %s in unknown zone %q", v.ID, v.Zone)
		}
	}
	if len(c.SecurityGroups) == 0 {
		c.SecurityGroups = []string{DefaultSecurityGroup}
	}
	if len(c.AccessKeys) == 0 {
		c.AccessKeys = map[string]string{DefaultAccessKeyID: DefaultAccessKeySecret}
	}
	if c.Delays.Attach == 0 {
		c.Delays.Attach = DefaultAttachDelay
	}
	if c.Delays.Detach == 0 {
		c.Delays.Detach = DefaultDetachDelay
	}
	if c.Delays.Delete == 0 {
		c.Delays.Delete = DefaultDeleteDelay
	}
	if c.RAMRole == "" {
		c.RAMRole = DefaultRAMRole
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return nil
}

// AddInstance creates an instance with its primary ENI (one primary IP in
// the vSwitch), InUse at once.
func (s *Server) AddInstance(spec InstanceSpec) (InstanceInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	if spec.InstanceType == "" {
		spec.InstanceType = DefaultInstanceType
	}
	t, ok := m.types[spec.InstanceType]
	if !ok {
		return InstanceInfo{}, fmt.Errorf("add instance: unknown instance type %q", spec.InstanceType)
	}
	if spec.VSwitchID == "" {
		for _, v := range s.m.vSwitchList() {
			if spec.Zone == "" || v.ZoneID == spec.Zone {
				spec.VSwitchID = v.ID
				break
			}
		}
	}
	v := m.vsw[spec.VSwitchID]
	if v == nil {
		return InstanceInfo{}, fmt.Errorf("add instance: no vswitch %q (zone %q)", spec.VSwitchID, spec.Zone)
	}
	if spec.Zone != "" && spec.Zone != v.ZoneID {
		return InstanceInfo{}, fmt.Errorf("add instance: vswitch %s is in zone %s, not %s", v.ID, v.ZoneID, spec.Zone)
	}
	if spec.ID == "" {
		spec.ID = m.nextID("i-sim")
	}
	if _, dup := m.instances[spec.ID]; dup {
		return InstanceInfo{}, fmt.Errorf("add instance: %s exists", spec.ID)
	}
	if spec.IPv6Count < 0 || spec.IPv6Count > t.IPv6PerENI {
		return InstanceInfo{}, fmt.Errorf("add instance: Ipv6AddressCount %d is not within 0 to %d, the IPv6 per ENI of %s", spec.IPv6Count, t.IPv6PerENI, t.ID)
	}
	now := s.now()
	e, err := m.createENI(newENIParams{vswID: v.ID, sgs: []string{s.cfg.SecurityGroups[0]}, ipv6Count: spec.IPv6Count, eniType: "Primary", trafficMode: "Standard", now: now})
	if err != nil {
		return InstanceInfo{}, fmt.Errorf("add instance: primary eni: %w", err)
	}
	m.setInstance(e, spec.ID)
	e.Status, e.DeviceIndex, e.InUseAt = "InUse", 0, now.Add(-s.cfg.MetadataLag)
	m.instances[spec.ID] = &InstanceState{ID: spec.ID, InstanceType: t.ID, ZoneID: v.ZoneID, VSwitchID: v.ID,
		PrimaryENI: e.ID, SecurityGroups: []string{s.cfg.SecurityGroups[0]}, CreatedAt: now}
	s.saveLocked()
	return InstanceInfo{ID: spec.ID, InstanceType: t.ID, Zone: v.ZoneID, VSwitchID: v.ID, PrimaryENI: e.ID, MAC: e.MAC, PrimaryIP: e.PrimaryIP, PrimaryIPv6: cloneOrNil(e.IPv6)}, nil
}

// InstanceENIs returns the ENIs attached, attaching or detaching to an
// instance, as the model holds them now (no stale view), sorted by ID:
// what a harness checks often, at the cost of those ENIs, where a Dump
// costs the whole account (its vSwitches' free prefixes included).
func (s *Server) InstanceENIs(instanceID string) []ENIState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ENIState
	for _, e := range s.m.byInstance[instanceID] {
		out = append(out, *e.clone())
	}
	slices.SortFunc(out, func(a, b ENIState) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// AddForeignENI creates a secondary ENI that enid does not own (no tags,
// as another controller's or an operator's), in the instance's vSwitch
// with one secondary address, and attaches it to the instance, InUse at
// once. It returns the ENI's ID.
func (s *Server) AddForeignENI(instanceID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	in := m.instances[instanceID]
	if in == nil {
		return "", fmt.Errorf("add foreign eni: no instance %q", instanceID)
	}
	now := s.now()
	e, err := m.createENI(newENIParams{vswID: in.VSwitchID, sgs: []string{s.cfg.SecurityGroups[0]}, secondary: 1,
		eniType: "Secondary", trafficMode: "Standard", description: "not enid's", now: now})
	if err != nil {
		return "", fmt.Errorf("add foreign eni: %w", err)
	}
	used := map[int]bool{}
	for _, o := range m.byInstance[instanceID] {
		used[o.DeviceIndex] = true
	}
	idx := 1
	for used[idx] {
		idx++
	}
	m.setInstance(e, instanceID)
	e.Status, e.DeviceIndex, e.InUseAt = "InUse", idx, now.Add(-s.cfg.MetadataLag)
	s.saveLocked()
	return e.ID, nil
}

// FragmentVSwitch fragments a vSwitch for tests and benchmarks: something
// outside the model takes one address of every aligned /28 that is free,
// so no IPv4 prefix can be given (InvalidVSwitchId.IpNotEnough) while the
// other 15 addresses of each block stay free for single addresses. Blocks
// freed later (a prefix released, addresses unassigned) can give prefixes
// again. It returns how many addresses it took (AvailableIpAddressCount
// drops by as many); DefragmentVSwitch undoes it.
func (s *Server) FragmentVSwitch(id string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pl := s.m.pools[id]
	if pl == nil {
		return 0, fmt.Errorf("fragment: no vswitch %q", id)
	}
	n := pl.fragment()
	s.m.syncAvailable(id)
	s.saveLocked()
	return n, nil
}

// DefragmentVSwitch releases every address FragmentVSwitch took in the
// vSwitch and returns how many.
func (s *Server) DefragmentVSwitch(id string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pl := s.m.pools[id]
	if pl == nil {
		return 0, fmt.Errorf("defragment: no vswitch %q", id)
	}
	n := pl.defragment()
	s.m.syncAvailable(id)
	s.saveLocked()
	return n, nil
}

// OccupyVSwitch takes every free IPv4 address of a vSwitch but leave for
// something outside the model, as other products in a vSwitch do (load
// balancers, databases, another cluster's nodes): AvailableIpAddressCount
// drops to leave, and what enid asks for beyond it is refused with
// InvalidVSwitchId.IpNotEnough. It returns how many addresses it took;
// DefragmentVSwitch gives them back.
func (s *Server) OccupyVSwitch(id string, leave int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pl := s.m.pools[id]
	if pl == nil {
		return 0, fmt.Errorf("occupy: no vswitch %q", id)
	}
	n := max(0, pl.available()-leave)
	got, ok := pl.take4(outsideHolder, n)
	if !ok {
		return 0, fmt.Errorf("occupy %s: %d addresses are not free", id, n)
	}
	for _, a := range got {
		pl.outside[a] = true
	}
	s.m.syncAvailable(id)
	s.saveLocked()
	return len(got), nil
}

// SetHooks replaces the hooks.
func (s *Server) SetHooks(h Hooks) {
	s.mu.Lock()
	s.hooks = h
	s.mu.Unlock()
}

// Dump returns a copy of the whole model.
func (s *Server) Dump() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.snapshot()
}

// Counters returns a copy of the call counters: action -> outcome ("ok" or
// the error code) -> count.
func (s *Server) Counters() map[string]map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]map[string]int, len(s.counters))
	for a, m := range s.counters {
		c := make(map[string]int, len(m))
		for k, v := range m {
			c[k] = v
		}
		out[a] = c
	}
	return out
}

// ResetCounters sets every counter to zero.
func (s *Server) ResetCounters() {
	s.mu.Lock()
	s.counters = map[string]map[string]int{}
	s.mu.Unlock()
}

func (s *Server) count(action, outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counters[action] == nil {
		s.counters[action] = map[string]int{}
	}
	s.counters[action][outcome]++
}

// Start serves the ECS/VPC API and control API on ecsAddr and the metadata
// service on metadataAddr (":0" ports are fine) until Close.
func (s *Server) Start(ecsAddr, metadataAddr string) error {
	ecsLn, err := net.Listen("tcp", ecsAddr)
	if err != nil {
		return fmt.Errorf("listen ecs %s: %w", ecsAddr, err)
	}
	mdLn, err := net.Listen("tcp", metadataAddr)
	if err != nil {
		ecsLn.Close() // the listen error is the one to report
		return fmt.Errorf("listen metadata %s: %w", metadataAddr, err)
	}
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed || s.ecsLn != nil {
		ecsLn.Close() // never served: nothing to report
		mdLn.Close()
		return errors.New("start: server closed or already started")
	}
	s.ecsLn, s.mdLn = ecsLn, mdLn
	for _, p := range []struct {
		ln net.Listener
		h  http.Handler
	}{{ecsLn, s.Handler()}, {mdLn, s.MetadataHandler()}} {
		srv := &http.Server{Handler: p.h, ReadHeaderTimeout: 10 * time.Second}
		s.srvs = append(s.srvs, srv)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("ecssim: serve", "addr", p.ln.Addr(), "err", err)
			}
		}()
	}
	return nil
}

// Endpoint is the host:port of the ECS/VPC API (after Start).
func (s *Server) Endpoint() string {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.ecsLn == nil {
		return ""
	}
	return s.ecsLn.Addr().String()
}

// MetadataURL is the base URL of the metadata service as seen by the
// instance (after Start); /latest/meta-data/... lies under it.
func (s *Server) MetadataURL(instanceID string) string {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.mdLn == nil {
		return ""
	}
	return "http://" + s.mdLn.Addr().String() + "/" + instanceID
}

// Close stops the listeners and the pending transitions, and waits for
// every goroutine of the Server to end. In-flight transitions are dropped.
func (s *Server) Close() error {
	s.bgMu.Lock()
	if s.closed {
		s.bgMu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	srvs := s.srvs
	s.bgMu.Unlock()
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range srvs {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w", err))
		}
	}
	s.wg.Wait()
	return errors.Join(errs...)
}

// after runs fn after d on a goroutine owned by the Server, unless the
// Server closes first.
func (s *Server) after(d time.Duration, fn func()) {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c, stop := s.timer(d)
		defer stop()
		select {
		case <-c:
			fn()
		case <-s.done:
		}
	}()
}

// timer fires once, d from now: on Config.Timers when set, else on a real
// timer (the simulated cloud is the outside world, with a time of its
// own; it imports nothing of the agent's, internal/clock included). stop
// releases a real timer early; a Timers timer is left to fire unheard.
func (s *Server) timer(d time.Duration) (<-chan time.Time, func()) {
	if s.cfg.Timers != nil {
		return s.cfg.Timers.After(d), func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// sleep waits d or until ctx ends or the Server closes.
func (s *Server) sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	c, stop := s.timer(d)
	defer stop()
	select {
	case <-c:
	case <-ctx.Done():
	case <-s.done:
	}
}

// saveLocked writes the state file, if configured. Called with mu held.
func (s *Server) saveLocked() {
	if s.cfg.StateFile == "" {
		return
	}
	b, err := json.MarshalIndent(s.m.snapshot(), "", "  ")
	if err == nil {
		tmp := s.cfg.StateFile + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, s.cfg.StateFile)
		}
	}
	if err != nil {
		s.log.Error("ecssim: save state", "file", s.cfg.StateFile, "err", err)
	}
}

// load reads the state file into the model. Transitions in flight when it
// was written complete at once. It reports whether a file was loaded.
func (s *Server) load() (bool, error) {
	if s.cfg.StateFile == "" {
		return false, nil
	}
	b, err := os.ReadFile(s.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("load state: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return false, fmt.Errorf("load state %s: %w", s.cfg.StateFile, err)
	}
	m := s.m
	m.region, m.vpcID, m.vpcCIDR, m.seq = st.Region, st.VPCID, st.VPCCIDR, st.Seq
	for _, v := range st.VSwitches {
		if err := m.addVSwitch(VSwitchConfig{ID: v.ID, Zone: v.ZoneID, CIDR: v.CIDR, IPv6CIDR: v.IPv6CIDR, Tags: v.Tags}); err != nil {
			return false, fmt.Errorf("load state: %w", err)
		}
		pl := m.pools[v.ID]
		for _, a := range v.Held {
			if !pl.usable4(a) || pl.outside[a] {
				return false, fmt.Errorf("load state: vswitch %s: held address %s is not a usable free address", v.ID, a)
			}
			pl.claim(outsideHolder, a)
			pl.outside[a] = true
		}
		m.syncAvailable(v.ID)
	}
	for _, in := range st.Instances {
		c := in
		m.instances[in.ID] = &c
	}
	for _, e := range st.ENIs {
		e := e.clone()
		pl := m.pools[e.VSwitchID]
		if pl == nil {
			return false, fmt.Errorf("load state: eni %s in unknown vswitch %s", e.ID, e.VSwitchID)
		}
		for _, q := range e.IPv4Prefixes {
			if _, ok := pl.blockOf(q); !ok {
				return false, fmt.Errorf("load state: eni %s: %s is not an aligned /28 of %s", e.ID, q, pl.cidr)
			}
		}
		for _, a := range append(append(append([]netip.Addr{e.PrimaryIP}, e.IPv4...), prefixAddrs(e.IPv4Prefixes)...), e.IPv6...) {
			if o, used := pl.used[a]; used {
				return false, fmt.Errorf("load state: %s held by both %s and %s", a, o, e.ID)
			}
			pl.claim(e.ID, a)
		}
		switch e.Status {
		case "Attaching":
			e.Status, e.InUseAt = "InUse", s.now()
		case "Detaching":
			e.Status, e.InstanceID, e.DeviceIndex = "Available", "", 0
		}
		m.put(e)
		if e.Status == "Deleting" {
			m.remove(e)
		}
		m.syncAvailable(e.VSwitchID)
	}
	return true, nil
}
