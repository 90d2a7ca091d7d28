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
}

// realistic is the model of the issue: mutations 150 ms, describes 50 ms,
// attach completing after 1 s, metadata 500 ms behind.
func realistic() latencyModel {
	return latencyModel{mutation: 150 * time.Millisecond, describe: 50 * time.Millisecond, attach: time.Second, lag: 500 * time.Millisecond}
}

func (m latencyModel) String() string {
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
