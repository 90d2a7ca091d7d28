package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/reconcile"
)

// Environment variables the agent, `enid plan` and the demo accept (the
// ones `enid sim` prints).
const (
	envECSEndpoint      = "ENID_ECS_ENDPOINT"
	envMetadataEndpoint = "ENID_METADATA_ENDPOINT"
	envRegion           = "ALIBABA_CLOUD_REGION_ID"
)

// nodeFlags are the flags that say where the agent's files are and how it
// reaches the cloud and the kernel; run, plan and status share them.
type nodeFlags struct {
	configFile string
	configDir  string
	runDir     string
	stateDir   string
	nodeName   string
	instanceID string
	datapath   string
	nodeNetNS  string
	logLevel   string
	// kubeletRootDir is the kubelet's --root-dir, where its checkpoints
	// are read as hints, and cniResultsDir the runtime's libcni result
	// cache; "" skips them.
	kubeletRootDir string
	cniResultsDir  string
	// labels are node labels for per-node overrides that match on them,
	// laid over the Node object's when `enid run` has the Kubernetes API.
	labels map[string]string
	// env, when set, is the whole environment newCloud reads the cloud's
	// endpoints, region and keys from instead of the process's: the demo
	// passes its simulator's, rather than changing the process environment.
	env map[string]string
}

// getenv reads the environment newCloud uses (see env).
func (f *nodeFlags) getenv(key string) string {
	if f.env != nil {
		return f.env[key]
	}
	return os.Getenv(key)
}

func (f *nodeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.configFile, "config-file", "/etc/enid/config.yaml", "main config file")
	fs.StringVar(&f.configDir, "config-dir", "/etc/enid/config.d", "drop-in directory (*.yaml merged in lexical order)")
	fs.StringVar(&f.runDir, "run-dir", "/run/enid", "directory of pods/, status/ and agent.json (shared with enid-cni)")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/enid", "directory for what cannot be observed again (planner memory, lock)")
	fs.StringVar(&f.nodeName, "node-name", "", "Kubernetes node name (default $NODE_NAME, else the hostname)")
	fs.StringVar(&f.instanceID, "instance-id", "", "ECS instance ID (default: from instance metadata)")
	fs.StringVar(&f.datapath, "datapath", "auto", "node datapath: linux (netlink, needs root), none (record only), auto (linux when root)")
	fs.StringVar(&f.nodeNetNS, "node-netns", "", "network namespace path that plays the node (default: the current one)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.kubeletRootDir, "kubelet-root-dir", desired.DefaultKubeletRootDir, "the kubelet's --root-dir: its allocated_pods_state (and device-plugins/kubelet_internal_checkpoint) are read as demand hints (\"\" to read none)")
	fs.StringVar(&f.cniResultsDir, "cni-results-dir", desired.DefaultCNIResultsDir, "the container runtime's libcni result cache, read as hints that an attachment is alive (\"\" to read none)")
	fs.StringToStringVar(&f.labels, "node-labels", nil, "node labels (k=v,...) for config overrides that match on labels; laid over the Node object's when the Kubernetes API is reachable")
}

func (f *nodeFlags) paths() reconcile.Paths {
	p := reconcile.DefaultPaths()
	p.Config = desired.ConfigSource{Main: f.configFile, DropInDir: f.configDir}
	p.Entries = filepath.Join(f.runDir, "pods")
	p.Statuses = filepath.Join(f.runDir, "status")
	p.AgentFile = filepath.Join(f.runDir, "agent.json")
	p.StateDir = f.stateDir
	p.Hints = desired.KubeletHintSources(f.kubeletRootDir, f.cniResultsDir)
	return p
}

func (f *nodeFlags) logger(w *os.File) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", f.logLevel)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

func (f *nodeFlags) resolveNodeName() string {
	if f.nodeName != "" {
		return f.nodeName
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, _ := os.Hostname() // best effort: the name is for display and overrides
	return h
}

// baseConfig loads the config for what is needed before the instance is
// known (cloud access). Per-node overrides that match on zone or instance
// type apply later, in the agent; cloud settings should not depend on them.
func baseConfig(f *nodeFlags) (desired.Config, error) {
	cfg, err := desired.LoadConfig(desired.ConfigSource{Main: f.configFile, DropInDir: f.configDir},
		desired.NodeFacts{NodeName: f.resolveNodeName(), Labels: f.labels})
	if err != nil {
		return cfg, err
	}
	return cfg, nil
}

// cloudSetup is a cloud client and what identifies this node to it.
type cloudSetup struct {
	client     *cloud.Client
	metadata   *cloud.Metadata
	instanceID string
}

// newCloud builds the cloud client from the config and the environment,
// and finds this instance's ID. clk is the process's one clock.
func newCloud(ctx context.Context, f *nodeFlags, cfg desired.Config, log *slog.Logger, obs cloud.Observer, clk clock.Clock) (cloudSetup, error) {
	cs, err := newCloudClient(ctx, f, cfg, log, obs, clk)
	if err != nil {
		return cloudSetup{}, err
	}
	id := f.instanceID
	if id == "" {
		if id, err = cs.metadata.InstanceID(ctx); err != nil {
			return cloudSetup{}, fmt.Errorf("find this instance's ID (use --instance-id or %s): %w", envMetadataEndpoint, err)
		}
	}
	cs.instanceID = id
	return cs, nil
}

// newCloudClient builds the cloud client from the config and the
// environment, without naming an instance (`enid sweep` acts for none).
func newCloudClient(ctx context.Context, f *nodeFlags, cfg desired.Config, log *slog.Logger, obs cloud.Observer, clk clock.Clock) (cloudSetup, error) {
	endpoint := cfg.Cloud.Endpoint
	if v := f.getenv(envECSEndpoint); v != "" {
		endpoint = v
	}
	mdURL := cfg.Cloud.MetadataEndpoint
	if v := f.getenv(envMetadataEndpoint); v != "" {
		mdURL = v
	}
	md := cloud.NewMetadata(mdURL, nil, cloud.WithMetadataClock(clk))
	region := cfg.Cloud.Region
	if v := f.getenv(envRegion); v != "" && region == "" {
		region = v
	}
	if region == "" {
		r, err := md.RegionID(ctx)
		if err != nil {
			return cloudSetup{}, fmt.Errorf("no cloud.region in the config and instance metadata did not answer: %w", err)
		}
		region = r
	}
	creds, err := cloud.CredentialsFrom(cloudCredentials(cfg.Cloud.Credentials), f.getenv, md)
	if err != nil {
		return cloudSetup{}, fmt.Errorf("cloud.credentials: %w", err)
	}
	c, err := cloud.New(cloud.Config{Endpoint: endpoint, Region: region, Credentials: creds,
		RateLimit: cloudRateLimit(cfg.Cloud.RateLimit), Observer: obs, Logger: log, Clock: clk,
		// First poll 100ms after the call: with the client's 1.5x growth
		// an attach that completes ~1s later is seen ~60ms after it with
		// 5 describes (50ms first: ~400ms late with 7; go run ./bench -run burst).
		Wait: cloud.WaitPolicy{Initial: 100 * time.Millisecond, Max: time.Second}})
	if err != nil {
		return cloudSetup{}, err
	}
	return cloudSetup{client: c, metadata: md}, nil
}

// newDatapath picks the datapath: the kernel when root (or asked), else a
// record kept in <run-dir>/datapath.json that `enid plan` can read too.
func newDatapath(f *nodeFlags, log *slog.Logger) (reconcile.Datapath, func(), error) {
	mode := f.datapath
	if mode == "auto" {
		mode = "none"
		if os.Geteuid() == 0 {
			mode = "linux"
		}
	}
	switch mode {
	case "linux":
		dp, err := linux.New(log, f.nodeNetNS)
		if err != nil {
			return nil, nil, fmt.Errorf("open the node datapath: %w", err)
		}
		return dp, func() { dp.Close() }, nil
	case "none":
		dp, err := reconcile.NewNoDatapath(filepath.Join(f.runDir, "datapath.json"))
		if err != nil {
			return nil, nil, err
		}
		return dp, func() {}, nil
	}
	return nil, nil, fmt.Errorf("--datapath %q: use linux, none or auto", f.datapath)
}

// configErrorLines turns a config error into one line per problem.
func configErrorLines(err error) []string {
	var ce *desired.ConfigError
	if errors.As(err, &ce) {
		return ce.Strings()
	}
	return strings.Split(err.Error(), "\n")
}

// cloudRateLimit converts the config's rate limit to the client's own type
// (package cloud does not import the config schema).
func cloudRateLimit(r desired.RateLimit) cloud.RateLimit {
	out := cloud.RateLimit{QPS: r.QPS, Burst: r.Burst}
	if len(r.PerAction) > 0 {
		out.PerAction = make(map[string]cloud.ActionRate, len(r.PerAction))
		for action, a := range r.PerAction {
			out.PerAction[action] = cloud.ActionRate{QPS: a.QPS, Burst: a.Burst}
		}
	}
	return out
}

// cloudCredentials converts the config's credentials selection to the
// client's own type; the source words are the same (TestCloudConfigConverts).
func cloudCredentials(c desired.Credentials) cloud.CredentialsConfig {
	return cloud.CredentialsConfig{Source: cloud.CredentialSource(c.Source), File: c.File, RoleName: c.RoleName}
}
