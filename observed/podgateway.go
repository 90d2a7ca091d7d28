package observed

// The gateways of a shared-mode pod: link-local addresses that the node
// answers on the pod's veth (a permanent neighbour entry naming the host
// veth's MAC), the same on every node. The planner writes them into the
// pod's status and the datapath sets them up; both read them here.
const (
	PodGatewayV4 = "169.254.1.1"
	PodGatewayV6 = "fe80::1"
)
