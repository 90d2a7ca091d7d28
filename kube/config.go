package kube

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Client-side limits of the API client (the event sink has its own, see
// Options). An agent runs on every node: a thousand nodes at these rates
// are far below what an API server takes, and the informers' watches cost
// no requests at all once established.
const (
	DefaultQPS   = 5
	DefaultBurst = 10
	// callTimeout bounds every request the link makes.
	callTimeout = 10 * time.Second
)

// ErrNoAPI is returned by RESTConfig when neither a kubeconfig nor the
// in-cluster environment names an API server: the link is off.
var ErrNoAPI = errors.New("no Kubernetes API configured")

// ConnectOptions say how to reach the API server.
type ConnectOptions struct {
	// Kubeconfig is a kubeconfig file; it wins over InCluster.
	Kubeconfig string
	// InCluster uses the pod's service account (the caller decides, from
	// KUBERNETES_SERVICE_HOST, that the agent runs as a pod).
	InCluster bool
	// QPS and Burst are the client's rate limits (0: the defaults).
	QPS   float32
	Burst int
	// UserAgent names the client in the API server's logs.
	UserAgent string
}

// RESTConfig builds the client config: the kubeconfig when given, else the
// in-cluster config when asked, else ErrNoAPI.
func RESTConfig(o ConnectOptions) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case o.Kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", o.Kubeconfig, err)
		}
	case o.InCluster:
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	default:
		return nil, ErrNoAPI
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	if cfg.QPS <= 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	cfg.Timeout = callTimeout
	if o.UserAgent != "" {
		cfg.UserAgent = o.UserAgent
	}
	return cfg, nil
}

// NewClientset returns a clientset for cfg.
func NewClientset(cfg *rest.Config) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}
