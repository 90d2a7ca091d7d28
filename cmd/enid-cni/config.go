package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/netnsid"
	"github.com/enidnet/enid/reconcile/status"
)

// Defaults and bounds of the plugin's own config keys.
const (
	defaultPodsDir   = "/run/enid/pods"
	defaultStatusDir = "/run/enid/status"
	defaultAgentFile = "/run/enid/agent.json"
	// defaultTimeout stays under the kubelet's 2-minute runtime request
	// timeout, so the runtime receives the plugin's reason rather than
	// cancelling the call.
	defaultTimeout         = 100 * time.Second
	maxTimeout             = 10 * time.Minute
	defaultDelTimeout      = 2 * time.Second
	maxDelTimeout          = 30 * time.Second
	defaultHeartbeatMaxAge = 30 * time.Second
)

// Kubernetes CNI_ARGS keys the plugin reads.
const (
	argPodNamespace = "K8S_POD_NAMESPACE"
	argPodName      = "K8S_POD_NAME"
	argPodUID       = "K8S_POD_UID"
)

// netConf is the plugin's network configuration as the runtime passes it on
// stdin: the standard keys, enid's own keys, and what the runtime injects
// (runtimeConfig, prevResult, the GC attachment lists).
type netConf struct {
	types.PluginConf

	// PodsDir is where entries are written (agent's desired input).
	PodsDir string `json:"podsDir,omitempty"`
	// StatusDir is where the agent publishes attachment statuses.
	StatusDir string `json:"statusDir,omitempty"`
	// AgentFile is the agent heartbeat.
	AgentFile string `json:"agentFile,omitempty"`
	// Timeout bounds how long ADD waits for a Ready status.
	Timeout *desired.Duration `json:"timeout,omitempty"`
	// DelTimeout bounds how long DEL waits for the agent's teardown.
	DelTimeout *desired.Duration `json:"delTimeout,omitempty"`
	// HeartbeatMaxAge is the age past which the heartbeat means "agent down".
	HeartbeatMaxAge *desired.Duration `json:"heartbeatMaxAge,omitempty"`

	RuntimeConfig runtimeConfig `json:"runtimeConfig"`

	// LegacyAttachments is the GC list under the name spec 1.1.0's text
	// used; libcni sends both names.
	LegacyAttachments []types.GCAttachment `json:"cni.dev/attachments,omitempty"`

	// Resolved values (not JSON).
	timeout, delTimeout, heartbeatMaxAge time.Duration
}

// runtimeConfig holds the capability arguments enid declares.
type runtimeConfig struct {
	PodAnnotations map[string]string `json:"io.kubernetes.cri.pod-annotations,omitempty"`
	// Bandwidth is the bandwidth capability: rates in bits per second,
	// bursts in bits.
	Bandwidth *desired.Bandwidth `json:"bandwidth,omitempty"`
}

// parseConf decodes and validates the network config and fills defaults.
func parseConf(data []byte) (*netConf, error) {
	var c netConf
	if err := json.Unmarshal(data, &c); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, types.NewError(types.ErrDecodingFailure, "decode network config", err.Error())
		}
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid network config", err.Error())
	}
	if c.Name == "" {
		return nil, invalidConf("network config has no \"name\"")
	}
	if c.CNIVersion == "" {
		return nil, invalidConf("network config has no \"cniVersion\"")
	}
	for _, p := range []struct {
		key string
		val *string
		def string
	}{
		{"podsDir", &c.PodsDir, defaultPodsDir},
		{"statusDir", &c.StatusDir, defaultStatusDir},
		{"agentFile", &c.AgentFile, defaultAgentFile},
	} {
		if *p.val == "" {
			*p.val = p.def
		}
		if !filepath.IsAbs(*p.val) {
			return nil, invalidConf(fmt.Sprintf("%q must be an absolute path, got %q", p.key, *p.val))
		}
		*p.val = filepath.Clean(*p.val)
	}
	for _, d := range []struct {
		key      string
		val      *desired.Duration
		out      *time.Duration
		def, min time.Duration
		max      time.Duration
	}{
		{"timeout", c.Timeout, &c.timeout, defaultTimeout, time.Millisecond, maxTimeout},
		{"delTimeout", c.DelTimeout, &c.delTimeout, defaultDelTimeout, 0, maxDelTimeout},
		{"heartbeatMaxAge", c.HeartbeatMaxAge, &c.heartbeatMaxAge, defaultHeartbeatMaxAge, time.Second, time.Hour},
	} {
		*d.out = d.def
		if d.val != nil {
			*d.out = d.val.D()
		}
		if *d.out < d.min || *d.out > d.max {
			return nil, invalidConf(fmt.Sprintf("%q is %s, want between %s and %s", d.key, *d.out, d.min, d.max))
		}
	}
	return &c, nil
}

// validAttachments returns the GC list, the union of both key names, and
// whether the runtime sent one at all.
func (c *netConf) validAttachments() (map[types.GCAttachment]bool, bool) {
	if c.ValidAttachments == nil && c.LegacyAttachments == nil {
		return nil, false
	}
	valid := make(map[types.GCAttachment]bool)
	for _, a := range append(append([]types.GCAttachment(nil), c.ValidAttachments...), c.LegacyAttachments...) {
		valid[a] = true
	}
	return valid, true
}

func (c *netConf) entries() *desired.EntryStore { return desired.NewEntryStore(c.PodsDir) }
func (c *netConf) statuses() *status.Store      { return status.NewStore(c.StatusDir) }

// podArgs are the Kubernetes keys of CNI_ARGS.
type podArgs struct {
	Namespace, Name, UID string
}

// parseArgs reads CNI_ARGS ("K=V;K=V"). Keys other than the Kubernetes
// ones are ignored, as runtimes add their own.
func parseArgs(s string) (podArgs, error) {
	var p podArgs
	if s == "" {
		return p, nil
	}
	for kv := range strings.SplitSeq(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return p, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_ARGS: %q is not KEY=VALUE", kv), "")
		}
		switch k {
		case argPodNamespace:
			p.Namespace = v
		case argPodName:
			p.Name = v
		case argPodUID:
			p.UID = v
		}
	}
	return p, nil
}

// attachmentArgs validates what ADD, CHECK and DEL need from the
// environment beyond what skel checks.
func attachmentArgs(args *skel.CmdArgs, needNetNS bool) error {
	if err := (desired.Key{ContainerID: args.ContainerID, IfName: args.IfName}).Validate(); err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_CONTAINERID or CNI_IFNAME", err.Error())
	}
	if !needNetNS {
		return nil
	}
	if !filepath.IsAbs(args.Netns) {
		return types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("CNI_NETNS must be an absolute path, got %q", args.Netns), "")
	}
	// Catch a wrong path here rather than after a wait for the agent.
	if _, err := os.Stat(args.Netns); err != nil {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_NETNS is not usable", err.Error())
	}
	// The runtime runs the plugin in the node's namespace: a CNI_NETNS
	// naming that same namespace (by whatever path) would put the pod's
	// interface and default route on the node. Refuse it, and anything that
	// is not a network namespace, before an entry is written.
	self, err := netnsid.Self()
	if err != nil {
		return types.NewError(types.ErrInternal, "identify the plugin's own network namespace", err.Error())
	}
	switch err := netnsid.CheckPod(args.Netns, self); {
	case errors.Is(err, netnsid.ErrNodeNetNS):
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_NETNS %s is the node's own network namespace: enid never sets a pod up there", args.Netns), err.Error())
	case errors.Is(err, netnsid.ErrNotNetNS):
		return types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_NETNS %s is not a network namespace", args.Netns), err.Error())
	case err != nil:
		return types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_NETNS is not usable", err.Error())
	}
	return nil
}

func invalidConf(msg string) error {
	return types.NewError(types.ErrInvalidNetworkConfig, msg, "")
}
