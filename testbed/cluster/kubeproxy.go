package cluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// kubeProxyConfig is the node's KubeProxyConfiguration: iptables mode,
// as on most production nodes, with the settings this machine needs.
//   - detectLocalMode InterfaceNamePrefix "enid": a pod's traffic comes
//     from its host veth, named enid<hash> (linux.HostVethName); a pod's
//     address is a VPC address, so no cluster CIDR tells pods apart.
//   - conntrack limits and timeouts 0: kube-proxy leaves them as they
//     are; nf_conntrack_max is not per namespace and belongs to the host.
//   - oomScoreAdj 0: lowering it needs CAP_SYS_RESOURCE, which this
//     machine's root lacks (kubelet-node.md).
//   - healthz and metrics on the node's address: the upstream e2e tests
//     probe kube-proxy's /healthz on a node's address.
func (n *Node) kubeProxyConfig(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
bindAddress: 0.0.0.0
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
detectLocalMode: InterfaceNamePrefix
detectLocal:
  interfaceNamePrefix: enid
oomScoreAdj: 0
iptables:
  masqueradeAll: %t
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, kubeconfig, n.Name, n.c.o.MasqueradeAll)
}

// startKubeProxy starts kube-proxy on the node, as user system:kube-proxy
// (the bootstrap policy's system:node-proxier role). Its rules live in the
// node's namespace only; the host's iptables are not touched.
func (n *Node) startKubeProxy() {
	n.c.t.Helper()
	cfg := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeProxyConfig(n.c.kubeconfig("kube-proxy", n.c.proxyToken))), 0o644); err != nil {
		n.c.t.Fatal(err)
	}
	n.run("kube-proxy", filepath.Join(n.c.bin, "kube-proxy"), "--config", cfg)
}
