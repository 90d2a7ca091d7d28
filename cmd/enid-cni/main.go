// Command enid-cni is enid's CNI plugin. It only writes the desired pod
// attachment entry and waits for the agent's status; it holds no cloud SDK
// and no netlink.
package main

func main() {}
