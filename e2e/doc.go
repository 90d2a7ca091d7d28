// Package e2e holds enid's end-to-end tests: the real agent binary (`enid
// run`) as a subprocess against the ECS simulator, with the simulator's
// namespaces playing the node and the VPC, and pods created and deleted
// through the real enid-cni plugin driven by libcni, or by a real
// containerd through its CRI (the TestCRI tests). They prove the
// acceptance points of the whole loop (desired -> observed -> plan ->
// execute -> status) rather than any one package; docs/testing.md says
// what each test shows and how to run them (as root:
// `go test -race -count=1 ./e2e/`).
package e2e
