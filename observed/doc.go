// Package observed holds what enid sees of the world: the instance and its
// limits, ENIs and their IPs as the ECS/VPC API reports them, vSwitches, and
// the node's kernel state (links and each pod attachment's network).
//
// It sits in the second step of desired -> observed -> plan -> execute. The
// types here are filled by cloud (the API half) and linux (the kernel half),
// read by planner, and cached by reconcile. The package does no I/O; Collect
// assembles a State through small interfaces it declares itself.
package observed
