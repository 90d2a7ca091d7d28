// Package clusterdns is what a test cluster needs to run cluster DNS as a
// real cluster does: CoreDNS (the binary kube/kubetest/build.sh builds,
// the version kubeadm deploys with Kubernetes 1.37) in an image built
// here, since no registry is reachable, and the manifests that run it as
// the coredns Deployment behind the kube-dns Service in kube-system, under
// the names Kubernetes' own e2e tests look for.
//
// It sits beside the real-cluster harness (testbed/cluster), which imports
// Image's tarball into each node's containerd, applies Manifests and points
// the kubelets' clusterDNS at the Service; it does not import the harness.
// coredns_test.go runs the binary as a process against a real API server.
package clusterdns

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/enidnet/enid/internal/ociimage"
)

// Repository is the repository Image names its image in: ours, not
// upstream's registry.k8s.io/coredns/coredns, because the image is not
// upstream's (it holds the binary alone).
const Repository = "enid.test/coredns"

// Binary is the name of CoreDNS in build.sh's cache directory.
const Binary = "coredns"

// Image writes the CoreDNS image, the binary kubeBin/coredns alone as
// /coredns, into dir as a docker-archive tarball (what `ctr -n k8s.io
// images import` reads) and returns its path and name,
// Repository:v<version the binary reports>. Its entrypoint is /coredns
// with the arguments -conf /etc/coredns/Corefile, where the Deployment
// mounts its ConfigMap. The same binary gives the same bytes.
func Image(ctx context.Context, dir, kubeBin string) (tarball, image string, err error) {
	bin := filepath.Join(kubeBin, Binary)
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", "", fmt.Errorf("coredns (sh kube/kubetest/build.sh DIR network-e2e builds it): %w", err)
	}
	version, err := Version(ctx, bin)
	if err != nil {
		return "", "", err
	}
	image = Repository + ":" + version
	ref, err := name.NewTag(image)
	if err != nil {
		return "", "", err
	}
	img, err := ociimage.Assemble([]ociimage.File{{Path: "/coredns", Mode: 0o755, Data: data}}, ociimage.Spec{
		Arch: runtime.GOARCH, Epoch: time.Unix(0, 0).UTC(), CreatedBy: "testbed/clusterdns", Stored: true,
		Config: v1.Config{
			Entrypoint: []string{"/coredns"},
			Cmd:        []string{"-conf", "/etc/coredns/Corefile"},
			WorkingDir: "/",
			// Documentation only, as in upstream's image.
			ExposedPorts: map[string]struct{}{"53/udp": {}, "53/tcp": {}},
		}})
	if err != nil {
		return "", "", fmt.Errorf("image %s: %w", image, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	tarball = filepath.Join(dir, "coredns.tar")
	if _, err := ociimage.WriteTarball(tarball, ref, img); err != nil {
		return "", "", fmt.Errorf("image %s: %w", image, err)
	}
	return tarball, image, nil
}

// Version runs the CoreDNS binary at bin with -version and returns the
// version it reports, as a tag: "v1.14.6" for "CoreDNS-1.14.6".
func Version(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "-version").Output()
	if err != nil {
		return "", fmt.Errorf("%s -version: %w", bin, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	v, ok := strings.CutPrefix(strings.TrimSpace(first), "CoreDNS-")
	if !ok || v == "" {
		return "", fmt.Errorf("%s -version: %q is not CoreDNS-<version>", bin, first)
	}
	return "v" + v, nil
}
