package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/kube"
	"github.com/enidnet/enid/reconcile"
)

// kubeFlags say how `enid run` reaches the Kubernetes API server.
type kubeFlags struct {
	kubeconfig string
	qps        float32
	burst      int
	eventQPS   float32
	// startupTaint is "key[:Effect]" to remove from the node once the
	// agent serves ("": none).
	startupTaint string
}

func (k *kubeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig of the Kubernetes API server (default: the in-cluster service account when run as a pod; neither: no API server)")
	fs.Float32Var(&k.qps, "kube-api-qps", kube.DefaultQPS, "client-side rate limit of Kubernetes API requests (per second)")
	fs.IntVar(&k.burst, "kube-api-burst", kube.DefaultBurst, "burst of Kubernetes API requests")
	fs.Float32Var(&k.eventQPS, "kube-event-qps", kube.DefaultEventQPS, "rate of pod event writes (per second, node-wide)")
	fs.StringVar(&k.startupTaint, "startup-taint", "", "taint (key[:Effect], Effect NoSchedule by default) to remove from this node once the agent serves; never added back (e.g. "+kube.DefaultStartupTaint+"; needs patch on nodes)")
}

// labelWait bounds how long the agent waits at start for its Node's labels
// before its first pass, so that label overrides apply from the start when
// the API server answers. It never delays a CNI ADD: the agent serves none
// before its first pass anyway, and it starts without the labels after it.
const labelWait = 3 * time.Second

// startKube starts the link to the API server when one is configured:
// --kubeconfig, else the in-cluster service account (not with --sim: a
// simulated node is not a cluster's). It returns nil when there is none;
// wake is set later to the agent's Wake. stop ends the link.
func startKube(ctx context.Context, k *kubeFlags, nodeName string, sim bool, log *slog.Logger, wake *atomic.Pointer[func()], clk clock.Clock) (link *kube.Link, stop func(), err error) {
	inCluster := !sim && os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
	cfg, err := kube.RESTConfig(kube.ConnectOptions{Kubeconfig: k.kubeconfig, InCluster: inCluster,
		QPS: k.qps, Burst: k.burst, UserAgent: "enid/" + version})
	if errors.Is(err, kube.ErrNoAPI) {
		log.Info("no Kubernetes API server configured: node labels from --node-labels only, no events, no node capacity")
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	cs, err := kube.NewClientset(cfg)
	if err != nil {
		return nil, nil, err
	}
	if k.startupTaint != "" {
		if _, err := kube.ParseTaint(k.startupTaint); err != nil {
			return nil, nil, fmt.Errorf("--startup-taint: %w", err)
		}
	}
	// client-go logs through klog, a process-wide logger: route it into
	// the agent's log, once, here where the process is wired.
	klog.SetSlogLogger(log.With("component", "client-go"))
	link = kube.New(cs, kube.Options{NodeName: nodeName, Logger: log, EventQPS: k.eventQPS, Pods: true, StartupTaint: k.startupTaint, Clock: clk,
		OnChange: func() {
			if w := wake.Load(); w != nil {
				(*w)()
			}
		}})
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		link.Run(lctx)
	}()
	log.Info("Kubernetes API link starting", "server", cfg.Host, "node", nodeName)
	seenWait := clk.NewTimer(labelWait)
	defer seenWait.Stop()
	select {
	case <-link.Seen():
	case <-seenWait.C():
		log.Warn("node not seen on the API server yet: starting without its labels", "node", nodeName, "waited", labelWait)
	case <-ctx.Done():
	}
	return link, func() { cancel(); <-done }, nil
}

// kubeAdapter adapts the link to what the agent declares (reconcile.Kube).
type kubeAdapter struct{ l *kube.Link }

func (k kubeAdapter) NodeLabels() (map[string]string, bool) { return k.l.NodeLabels() }

func (k kubeAdapter) State() string { return k.l.State() }

func (k kubeAdapter) NodeUnschedulable() time.Time { return k.l.UnschedulableSince() }

func (k kubeAdapter) PodStatus(r reconcile.PodReport) {
	s := kube.PodStatus{Namespace: r.Namespace, Name: r.Name, UID: r.UID, Attachment: r.Key.String(),
		Phase: r.Phase, ReasonCode: r.ReasonCode, Reason: r.Reason}
	if r.IPv4.IsValid() {
		s.Addresses = append(s.Addresses, r.IPv4.String())
	}
	if r.IPv6.IsValid() {
		s.Addresses = append(s.Addresses, r.IPv6.String())
	}
	k.l.PodStatus(s)
}

func (k kubeAdapter) PodFacts(namespace, name, uid string) (reconcile.PodFacts, bool) {
	f, ok := k.l.PodFacts(namespace, name, uid)
	return reconcile.PodFacts{Annotations: f.Annotations, StatefulSet: f.StatefulSet}, ok
}

func (k kubeAdapter) NodeStatus(r reconcile.NodeReport) {
	h := map[reconcile.NodeHealth]kube.Health{reconcile.HealthReady: kube.HealthReady, reconcile.HealthConfigInvalid: kube.HealthConfigInvalid,
		reconcile.HealthCloudDegraded: kube.HealthCloudDegraded, reconcile.HealthNotReady: kube.HealthNotReady}[r.Health]
	s := kube.NodeStatus{Ready: r.Ready, Health: h, Message: r.Reason, CapacityKnown: r.CapacityKnown, PodIPs: r.Capacity, Exclusive: r.Exclusive}
	if r.Exclusive {
		s.ENIs = r.Capacity
	}
	k.l.NodeStatus(s)
}
