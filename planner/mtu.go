package planner

// podMTU is the MTU a pod on the ENI with this MAC gets, on its interface
// (both ends of its veth in shared mode; the service veth beside its ENI
// in exclusive mode), and so on the routes through it: eni.mtu when the
// config sets one (the ENI's device is configured to it as well), else
// the MTU of the ENI's device as observed on the node (the kernel's view
// of what ECS gives the interface: 1500, or 8500 with jumbo frames), so a
// pod never sends frames larger than its ENI carries nor stays at 1500 on
// a jumbo-frame ENI. 0 when neither is known: the kernel's default.
func (b *builder) podMTU(mac string) int {
	if b.cfg.ENI.MTU > 0 {
		return b.cfg.ENI.MTU
	}
	if dev, ok := b.devices[mac]; ok && dev.MTU > 0 {
		return dev.MTU
	}
	return 0
}
