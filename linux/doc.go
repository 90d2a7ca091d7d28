// Package linux is enid's node datapath over netlink: ENI devices, pod veths
// and policy routing, exclusive ENIs, tc bandwidth limits. It reads the
// kernel's state (the node half of observed) and makes the kernel match
// what a plan asks (the execute step of desired -> observed -> plan ->
// execute). Every operation is "ensure": idempotent, repairing drift, and
// reporting what it changed. docs/datapath.md lists every route, rule,
// neighbour, sysctl and name it creates.
package linux
