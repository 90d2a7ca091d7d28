// Package cnirun drives the enid-cni plugin binary through libcni, as a
// container runtime (containerd's go-cni) does: the demo, the end-to-end
// tests and the benchmarks create and delete pods through it, so what they
// exercise is the real plugin protocol, not a shortcut into the agent.
package cnirun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
)

// Runtime invokes the plugin for one network list.
type Runtime struct {
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
}

// Pod is one pod sandbox as the runtime knows it.
type Pod struct {
	ContainerID string
	NetNS       string
	IfName      string
	Namespace   string
	Name        string
	UID         string
	Annotations map[string]string
}

// Conflist returns enid's conflist (as examples/cni/10-enid.conflist) with
// the agent's files under runDir and the given ADD timeout.
func Conflist(runDir string, timeout time.Duration) []byte {
	conf := map[string]any{
		"cniVersion":  "1.0.0",
		"cniVersions": []string{"1.0.0", "1.1.0"},
		"name":        "enid",
		"plugins": []any{map[string]any{
			"type":      "enid-cni",
			"podsDir":   filepath.Join(runDir, "pods"),
			"statusDir": filepath.Join(runDir, "status"),
			"agentFile": filepath.Join(runDir, "agent.json"),
			"timeout":   timeout.String(),
			"capabilities": map[string]bool{
				"io.kubernetes.cri.pod-annotations": true,
				"bandwidth":                         true,
			},
		}},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		panic(err) // a literal map of strings always encodes
	}
	return b
}

// New returns a Runtime that finds the plugin in pluginDir and keeps
// libcni's result cache in cacheDir.
func New(pluginDir, cacheDir string, conflist []byte) (*Runtime, error) {
	list, err := libcni.ConfListFromBytes(conflist)
	if err != nil {
		return nil, fmt.Errorf("parse conflist: %w", err)
	}
	// An explicit exec: given nil, libcni creates its default one lazily on
	// first use, unguarded, which races when pods are added in parallel.
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return &Runtime{cni: libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, cacheDir, exec), list: list}, nil
}

func (r *Runtime) conf(p Pod) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: p.ContainerID, NetNS: p.NetNS, IfName: p.IfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.Namespace},
			{"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.ContainerID},
			{"K8S_POD_UID", p.UID},
		},
		CapabilityArgs: map[string]any{},
	}
	if p.Annotations != nil {
		rt.CapabilityArgs["io.kubernetes.cri.pod-annotations"] = p.Annotations
	}
	if rt.IfName == "" {
		rt.IfName = "eth0"
	}
	return rt
}

// Add runs CNI ADD and returns the result.
func (r *Runtime) Add(ctx context.Context, p Pod) (*types100.Result, error) {
	res, err := r.cni.AddNetworkList(ctx, r.list, r.conf(p))
	if err != nil {
		return nil, err
	}
	return types100.NewResultFromResult(res)
}

// Del runs CNI DEL.
func (r *Runtime) Del(ctx context.Context, p Pod) error {
	return r.cni.DelNetworkList(ctx, r.list, r.conf(p))
}

// Check runs CNI CHECK against the cached ADD result.
func (r *Runtime) Check(ctx context.Context, p Pod) error {
	return r.cni.CheckNetworkList(ctx, r.list, r.conf(p))
}

// Status runs CNI STATUS.
func (r *Runtime) Status(ctx context.Context) error { return r.cni.GetStatusNetworkList(ctx, r.list) }

// Code returns the CNI error code of err (0 when err is not a CNI error).
func Code(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

// Plugin returns a directory holding an enid-cni binary: the one beside
// the running executable, else one on PATH, else one built from source
// with `go build` into buildDir (which needs the Go toolchain and enid's
// source: the quick start's `go run` has both).
func Plugin(buildDir string) (string, error) {
	if exe, err := os.Executable(); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(exe), "enid-cni")); err == nil {
			return filepath.Dir(exe), nil
		}
	}
	if p, err := exec.LookPath("enid-cni"); err == nil {
		return filepath.Dir(p), nil
	}
	if err := os.MkdirAll(buildDir, 0o755); err != nil {
		return "", err
	}
	// Static (no cgo): the plugin runs once per CNI call, and a static
	// binary starts about 1.2 ms sooner than one that loads libc (measured
	// with 100 VERSION calls; docs/cni.md).
	cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, "enid-cni"), "github.com/enidnet/enid/cmd/enid-cni")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("no enid-cni beside enid or on PATH, and building it failed: %v\n%s", err, out)
	}
	return buildDir, nil
}
