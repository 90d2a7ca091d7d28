package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/enidnet/enid/kube/kubetest"
	"github.com/enidnet/enid/testbed/clusterdns"
)

// The cluster DNS (Options.DNS): the kube-dns Service's address, the
// tenth of ServiceCIDR as kubeadm makes it, and the cluster's domain.
const (
	DNSIP         = "10.0.0.10"
	ClusterDomain = "cluster.local"
)

// dnsConfig is the kubelets' DNS settings: pods resolve through the
// cluster DNS when the cluster has one.
func (c *Cluster) dnsConfig() string {
	if !c.o.DNS {
		return ""
	}
	return fmt.Sprintf("clusterDNS: [%s]\nclusterDomain: %s\n", DNSIP, ClusterDomain)
}

// dnsImage builds CoreDNS's image for every node's containerd.
func (c *Cluster) dnsImage() string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(c.Dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	tarball, image, err := clusterdns.Image(ctx, dir, kubetest.BinDir())
	if err != nil {
		c.t.Fatalf("the cluster DNS image: %v", err)
	}
	c.dnsImageName = image
	return tarball
}

// StartDNS deploys the cluster DNS (CoreDNS in kube-system, the kube-dns
// Service at DNSIP) and waits until it answers: its pods need a CNI, so
// call it once one serves.
func (c *Cluster) StartDNS() {
	c.t.Helper()
	if !c.o.DNS {
		c.t.Fatal("StartDNS on a cluster started without Options.DNS")
	}
	path := filepath.Join(c.Dir, "coredns.yaml")
	if err := os.WriteFile(path, []byte(clusterdns.Manifests(DNSIP, ClusterDomain, c.dnsImageName)), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.MustKubectl("apply", "-f", path)
	c.MustKubectl("-n", clusterdns.Namespace, "rollout", "status", "deployment/"+clusterdns.Deployment, "--timeout=3m")
}
