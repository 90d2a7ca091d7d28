package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/enidnet/enid/kube/kubetest"
	"github.com/enidnet/enid/testbed/simvpc"
)

// Ports of the control plane, in the node's namespace (nothing else
// listens there).
const (
	etcdPort       = "2379"
	etcdPeerPort   = "2380"
	apiPort        = "443"
	schedulerPort  = "10259"
	controllerPort = "10257"
)

func (c *Cluster) caFile() string { return filepath.Join(c.Dir, "certs", "apiserver.crt") }

// startControlPlane starts etcd and the API server (to /readyz), then the
// scheduler and the controller-manager. The API server authorizes with
// Node and RBAC and admits with NodeRestriction, as a production cluster
// does: the kubelet is system:node:<name>, the agent its ServiceAccount
// (the controller-manager creates the accounts, the root CA ConfigMap and
// the tokens' keys are the cluster's).
func (c *Cluster) startControlPlane() {
	c.t.Helper()
	// The static tokens: the admin, each node's kubelet, and kube-proxy
	// as the user the bootstrap policy binds to system:node-proxier.
	tokens := fmt.Sprintf("%s,admin,uid-admin,\"system:masters\"\n%s,system:kube-proxy,uid-kube-proxy,\n", c.adminToken, c.proxyToken)
	for _, n := range c.Nodes {
		tokens += fmt.Sprintf("%s,system:node:%s,uid-%s,\"system:nodes\"\n", n.token, n.Name, n.Name)
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		c.t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		c.t.Fatal(err)
	}
	saKey := filepath.Join(c.Dir, "sa.key")
	if err := os.WriteFile(saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		c.t.Fatal(err)
	}
	client, peer := "http://127.0.0.1:"+etcdPort, "http://127.0.0.1:"+etcdPeerPort
	c.first().run("etcd", filepath.Join(c.bin, "etcd"), "--name", "node", "--data-dir", filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "node="+peer, "--unsafe-no-fsync")
	insecure := c.httpClient(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probes of the cluster's own servers
	kubetest.WaitHTTP(c.t, insecure, client+"/health", nil, 30*time.Second)
	c.first().run("kube-apiserver", filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers", client,
		"--bind-address", "0.0.0.0", "--secure-port", apiPort, "--advertise-address", c.NodeIP.String(),
		"--endpoint-reconciler-type", c.endpointReconciler(),
		// Nodes' names resolve nowhere here (no DNS): exec, logs and
		// port-forward reach a kubelet at its Node's InternalIP.
		"--kubelet-preferred-address-types", "InternalIP",
		"--cert-dir", filepath.Join(c.Dir, "certs"),
		"--token-auth-file", filepath.Join(c.Dir, "tokens.csv"),
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged=true",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saKey, "--service-account-signing-key-file", saKey,
		"--service-cluster-ip-range", strings.Join(c.ServiceCIDRs(), ","))
	kubetest.WaitHTTP(c.t, insecure, "https://"+c.NodeIP.String()+":"+apiPort+"/readyz",
		map[string]string{"Authorization": "Bearer " + c.adminToken}, 90*time.Second)
	admin := c.kubeconfig("admin", c.adminToken)
	c.Kubeconfig = admin
	c.first().run("kube-scheduler", filepath.Join(c.bin, "kube-scheduler"), "--kubeconfig", admin,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", schedulerPort)
	c.first().run("kube-controller-manager", filepath.Join(c.bin, "kube-controller-manager"), "--kubeconfig", admin,
		"--leader-elect=false", "--bind-address", "127.0.0.1", "--secure-port", controllerPort,
		"--controllers", "*", "--service-account-private-key-file", saKey, "--root-ca-file", c.caFile(),
		"--use-service-account-credentials=false")
	kubetest.WaitHTTP(c.t, insecure, "https://127.0.0.1:"+schedulerPort+"/healthz", nil, 60*time.Second)
	kubetest.WaitHTTP(c.t, insecure, "https://127.0.0.1:"+controllerPort+"/healthz", nil, 60*time.Second)
}

// kubeconfig writes a kubeconfig for a token and returns its path.
func (c *Cluster) kubeconfig(name, token string) string {
	c.t.Helper()
	p := filepath.Join(c.Dir, name+".kubeconfig")
	if err := kubetest.WriteKubeconfig(p, "https://"+c.NodeIP.String()+":"+apiPort, c.caFile(), name, token); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// HTTPClient is an HTTP client whose connections start in the first
// node's network namespace: from the host it reaches what the node
// reaches (pod addresses, the control plane, the simulator).
func (c *Cluster) HTTPClient() *http.Client { return c.httpClient(nil) }

func (c *Cluster) httpClient(tc *tls.Config) *http.Client { return nsHTTPClient(c.first().NS, tc) }

// HTTPClient is an HTTP client whose connections start in the node's
// network namespace, as a program on the node's host network.
func (n *Node) HTTPClient() *http.Client { return nsHTTPClient(n.NS, nil) }

// VPCHTTPClient is an HTTP client whose connections start in the vpc
// namespace: a client elsewhere in the VPC (another instance, a load
// balancer's backend address), reaching nodes through their primary
// interfaces and pods through their ENIs.
func (c *Cluster) VPCHTTPClient() *http.Client { return nsHTTPClient(c.Sim.Topology.VPCNS, nil) }

func nsHTTPClient(ns string, tc *tls.Config) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: nsDialer(ns), TLSClientConfig: tc, DisableKeepAlives: true}}
}

// nsDialer dials from inside the namespace at path: the socket is made on
// a thread in that namespace and stays there, so the connection runs in it
// whichever thread reads it.
func nsDialer(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := simvpc.InNS(path, func() error {
			var d net.Dialer
			var err error
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// endpointReconciler is how the API server publishes the kubernetes
// Service's endpoint: as a production server does (a lease) for
// kube-proxy to translate, or not at all when there is no kube-proxy and
// the first node answers the Service's address itself (ServiceIP on lo).
func (c *Cluster) endpointReconciler() string {
	if c.o.KubeProxy {
		return "lease"
	}
	return "none"
}
