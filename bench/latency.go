package main

import (
	"fmt"
	"time"

	"github.com/enidnet/enid/cloud/ecssim"
)

// latencyModel is the cloud the burst, churn and fleet run against: a
// mutation answers after mutation, a describe after describe, an attach
// completes attach after it is answered, and the metadata service learns
// an attached ENI's MAC lag after that.
type latencyModel struct {
	mutation, describe, attach, lag time.Duration
	// stale is how long describes lag a change (0: not at all).
	stale time.Duration
	// profile, when set, is the ecssim profile apply uses instead of the
	// fields (which then state its means, for bounds and setups).
	profile string
}

// modelFor returns the latency model of a simulator profile: "" or "fast"
// is realistic() below (the harness's own model, as before); "realistic"
// is ecssim's realistic profile, with its means.
func modelFor(profile string) (latencyModel, error) {
	switch profile {
	case "", ecssim.ProfileFast:
		return realistic(), nil
	case ecssim.ProfileRealistic:
		// 60 ms fixed + exponential with mean 60 ms per call.
		return latencyModel{mutation: 120 * time.Millisecond, describe: 120 * time.Millisecond,
			attach: ecssim.RealisticAttach, lag: ecssim.RealisticMetadataLag, stale: ecssim.RealisticStaleReads,
			profile: ecssim.ProfileRealistic}, nil
	}
	return latencyModel{}, fmt.Errorf("unknown simulator profile %q", profile)
}

// realistic is the model of the issue: mutations 150 ms, describes 50 ms,
// attach completing after 1 s, metadata 500 ms behind.
func realistic() latencyModel {
	return latencyModel{mutation: 150 * time.Millisecond, describe: 50 * time.Millisecond, attach: time.Second, lag: 500 * time.Millisecond}
}

func (m latencyModel) String() string {
	if m.profile != "" {
		return fmt.Sprintf("ecssim profile %s: calls %s mean, attach completes %s after, describes %s stale, metadata lag %s, OperationConflict on overlap and for %.0f%% of mutations",
			m.profile, ms(m.mutation), ms(m.attach), ms(m.stale), ms(m.lag), 100*ecssim.RealisticConflictRate)
	}
	return fmt.Sprintf("mutations %s, describes %s, attach completes %s after, metadata lag %s",
		ms(m.mutation), ms(m.describe), ms(m.attach), ms(m.lag))
}

func ms(d time.Duration) string {
	if d >= time.Second && d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// apply sets the model on a simulator config.
func (m latencyModel) apply(c *ecssim.Config) {
	if m.profile != "" {
		if err := ecssim.ApplyProfile(c, m.profile); err != nil {
			panic(err) // modelFor accepted the name
		}
		return
	}
	per := map[string]ecssim.LatencyDist{}
	for _, a := range []string{"CreateNetworkInterface", "AttachNetworkInterface", "DetachNetworkInterface",
		"DeleteNetworkInterface", "AssignPrivateIpAddresses", "UnassignPrivateIpAddresses",
		"AssignIpv6Addresses", "UnassignIpv6Addresses"} {
		per[a] = ecssim.LatencyDist{Fixed: m.mutation}
	}
	for _, a := range []string{"DescribeNetworkInterfaces", "DescribeInstances", "DescribeInstanceTypes", "DescribeVSwitches"} {
		per[a] = ecssim.LatencyDist{Fixed: m.describe}
	}
	c.Latency = ecssim.Latency{PerAction: per}
	c.Delays = ecssim.Delays{Attach: m.attach, Detach: m.attach, Delete: 100 * time.Millisecond}
	c.MetadataLag = m.lag
}
