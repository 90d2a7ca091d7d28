package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/enidnet/enid/cniinstall"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/reconcile"
	"github.com/enidnet/enid/testbed/simnode"
)

func newRunCmd() *cobra.Command {
	var (
		f           nodeFlags
		k           kubeFlags
		metricsAddr string
		sim         bool
		pprof       bool
		cni         cniFlags
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent",
		Long: `Run the node agent: watch the config and the pod entries, observe the cloud
and the kernel, plan, apply, and publish a status per pod attachment.

With --sim it starts the built-in ECS simulator in-process, with one instance
for this node (and, as root, namespaces that play the node and the VPC), and
runs against it: the way to try enid anywhere.`,
		Example: `  # on a node (as the DaemonSet does)
  enid run --metrics-addr 127.0.0.1:9090

  # on a node, writing the CNI network list once the agent serves (the
  # DaemonSet, with the host's /etc/cni/net.d mounted at /host/etc/cni/net.d)
  enid run --cni-conf-dir /host/etc/cni/net.d

  # anywhere, against the built-in simulator, with files under /tmp/enid
  enid run --sim --run-dir /tmp/enid/run --state-dir /tmp/enid/state --config-file /tmp/enid/config.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log, err := f.logger(os.Stderr)
			if err != nil {
				return err
			}
			// A wrong list or conf dir fails the start, before anything runs.
			serving, err := cni.serving(log)
			if err != nil {
				return err
			}
			if sim {
				sn, err := startSim(&f, log, cmd)
				if err != nil {
					return err
				}
				defer sn.Close()
			}
			return runAgent(ctx, cmd, &f, &k, sim, metricsServer{addr: metricsAddr, pprof: pprof}, serving, log)
		},
	}
	f.register(cmd.Flags())
	k.register(cmd.Flags())
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9090", "serve Prometheus metrics at http://ADDR/metrics (\"\" to disable)")
	cmd.Flags().BoolVar(&sim, "sim", false, "start the built-in ECS simulator and run against it")
	cni.register(cmd.Flags())
	cmd.Flags().BoolVar(&pprof, "pprof", false, "also serve Go's profiles at http://<--metrics-addr>/debug/pprof/ (heap, CPU, goroutines; for diagnosing the agent, never for a public address)")
	return cmd
}

// runAgent builds the agent from the flags and runs it until ctx ends.
// serving (nil: none) is called each time the agent turns ready.
func runAgent(ctx context.Context, cmd *cobra.Command, f *nodeFlags, k *kubeFlags, sim bool, ms metricsServer, serving func() error, log *slog.Logger) error {
	cfg, err := baseConfig(f)
	if err != nil {
		printLines(cmd.ErrOrStderr(), "invalid config:", configErrorLines(err))
		return &exitError{code: 1, err: errors.New("refusing to start with an invalid config")}
	}
	// The one clock of the process: the agent, its cloud and metadata
	// clients and its Kubernetes link all run on it.
	clk := clock.Real{}
	metrics := reconcile.NewMetrics()
	cs, err := newCloud(ctx, f, cfg, log, metrics, clk)
	if err != nil {
		return err
	}
	dp, closeDP, err := newDatapath(f, log)
	if err != nil {
		return err
	}
	defer closeDP()
	var wake atomic.Pointer[func()]
	link, stopKube, err := startKube(ctx, k, f.resolveNodeName(), sim, log, &wake, clk)
	if err != nil {
		return err
	}
	defer stopKube()
	rc := reconcile.Config{
		Paths: f.paths(), InstanceID: cs.instanceID, NodeName: f.resolveNodeName(), NodeLabels: f.labels,
		Cloud: cs.client, Datapath: dp, Logger: log, Metrics: metrics, Version: version, Clock: clk, Serving: serving,
	}
	if link != nil {
		rc.Kube = kubeAdapter{link}
	}
	agent, err := reconcile.New(rc)
	if err != nil {
		return err
	}
	w := agent.Wake
	wake.Store(&w)
	if ms.addr != "" {
		stopMetrics, err := serveMetrics(ms, agent.Metrics())
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	return agent.Run(ctx)
}

// cniFlags say where the agent writes the CNI network list once it serves.
type cniFlags struct {
	// confDir is the runtime's conf dir as mounted here ("": write none).
	confDir string
	// conflist is the list to write there.
	conflist string
}

func (c *cniFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.confDir, "cni-conf-dir", "", "write the CNI network list into this dir (the container runtime's conf dir as mounted here) once the agent serves, and leave it there (\"\": write none; docs/deploy.md, \"When the network list appears\")")
	fs.StringVar(&c.conflist, "cni-conflist", cniinstall.ImageConflist, "the network list --cni-conf-dir gets (the image carries it here)")
}

// serving returns the hook that installs the list each time the agent
// turns ready (nil without --cni-conf-dir). It checks the list and the dir
// first: a wrong path fails the start, not the first ready pass.
func (c *cniFlags) serving(log *slog.Logger) (func() error, error) {
	if c.confDir == "" {
		return nil, nil
	}
	f := cniinstall.Conflist(c.conflist, c.confDir)
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("--cni-conf-dir %s --cni-conflist %s: %w", c.confDir, c.conflist, err)
	}
	return func() error {
		ch, err := cniinstall.Ensure(f)
		if err != nil {
			return err
		}
		if ch.Action != "unchanged" || len(ch.Removed) > 0 {
			log.Info("CNI network list written: the agent serves", "change", ch.String())
		}
		return nil
	}, nil
}

// startSim starts an in-process simulated node for `run --sim` and points
// the flags and the environment at it. Without a config file it writes one
// that matches the simulator.
func startSim(f *nodeFlags, log *slog.Logger, cmd *cobra.Command) (*simnode.Node, error) {
	withDP := f.datapath == "linux" || (f.datapath == "auto" && os.Geteuid() == 0)
	sn, err := simnode.Start(simnode.Options{Datapath: withDP})
	if err != nil {
		return nil, err
	}
	for k, v := range sn.Env() {
		os.Setenv(k, v)
	}
	f.instanceID = sn.Instance.ID
	if withDP {
		f.datapath, f.nodeNetNS = "linux", sn.NodeNS()
	} else {
		f.datapath = "none"
	}
	if _, err := os.Stat(f.configFile); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dirOf(f.configFile), 0o755); err != nil {
			sn.Close()
			return nil, err
		}
		if err := os.WriteFile(f.configFile, []byte(sn.ConfigYAML()), 0o644); err != nil {
			sn.Close()
			return nil, fmt.Errorf("write a simulator config: %w", err)
		}
		log.Info("wrote a config for the simulator", "file", f.configFile)
	}
	log.Info("simulator running", "ecs", sn.Sim.Endpoint(), "instance", sn.Instance.ID, "datapath", f.datapath)
	fmt.Fprintln(cmd.ErrOrStderr(), "# to reach the simulator from another shell:")
	for k, v := range sn.Env() {
		fmt.Fprintf(cmd.ErrOrStderr(), "export %s=%s\n", k, v)
	}
	return sn, nil
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return "."
}

// metricsServer is what `enid run` serves over HTTP: /metrics at addr
// ("" serves nothing) and, with pprof, Go's profiles under /debug/pprof/.
type metricsServer struct {
	addr  string
	pprof bool
}

// serveMetrics serves /metrics (and the profiles) until the returned stop
// is called.
func serveMetrics(ms metricsServer, m *reconcile.Metrics) (func(), error) {
	ln, err := net.Listen("tcp", ms.addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w", ms.addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	if ms.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "metrics server:", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx) //nolint:errcheck // best effort at exit; Serve's error is reported above
		<-done
	}, nil
}
