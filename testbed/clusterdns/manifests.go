package clusterdns

import (
	"bytes"
	"fmt"
	"strings"
	"text/template"
)

// The names a cluster's DNS goes by. The upstream e2e suite finds the DNS
// pods by ServiceLabel in kube-system and the Service by ServiceName
// (test/e2e/network/dns_common.go); kubeadm deploys under the same names.
const (
	Namespace   = "kube-system"
	ServiceName = "kube-dns"
	// Deployment names the Deployment, its ConfigMap and ServiceAccount.
	Deployment = "coredns"
	// ServiceLabel is the label (key=value, a selector) on the pods and
	// the Service.
	ServiceLabel = labelKey + "=" + labelValue
	// ClusterRole names the ClusterRole and its binding.
	ClusterRole = "system:coredns"
)

// Replicas is how many CoreDNS pods the Deployment runs: two, so that on
// the two-node cluster each node has one (the anti-affinity spreads them)
// and name lookups keep working while one node's datapath is switched or
// its pod restarts; the e2e tests then also resolve across nodes, as on
// any real cluster.
const Replicas = 2

// Ports inside the pod. health and ready listen on all addresses because
// the kubelet probes the pod's IP.
const (
	dnsPort     = 53
	healthAddr  = ":8080"
	readyAddr   = ":8181"
	metricsAddr = ":9153"
)

// corefile is what CoreDNS serves. The manifest's is corefile{domain,
// 53, ":8080", ":8181", ":9153", "/etc/resolv.conf", ""}; the test runs
// the same file with its own ports, upstream and kubeconfig.
type corefile struct {
	// Domain is the cluster domain, e.g. cluster.local.
	Domain string
	// Port is the DNS port (UDP and TCP).
	Port int
	// Health, Ready and Metrics are the listen addresses of the health,
	// ready and prometheus plugins.
	Health, Ready, Metrics string
	// Upstream is what forward sends every name outside the cluster
	// domain to: a resolv.conf path or addresses.
	Upstream string
	// Kubeconfig, when set, is the kubeconfig the kubernetes plugin uses
	// instead of the pod's service account (a process outside a pod).
	Kubeconfig string
}

// The Corefile, plugin by plugin (CoreDNS orders them itself, by its
// directive list, whatever their order here):
//   - errors logs failed queries; there is no log plugin, so answered
//     queries are not logged (an e2e run would flood the container log).
//   - health (liveness, with lameduck so a stopping pod keeps answering
//     while the Service drops it) and ready (readiness: 200 once the
//     kubernetes plugin has listed Services, EndpointSlices, namespaces).
//   - kubernetes answers the cluster domain and reverse zones; pods
//     insecure answers a-b-c-d.<ns>.pod names (the DNS e2e tests query
//     them); fallthrough for the reverse zones passes PTRs of addresses
//     that are not the cluster's on to forward; ttl 30 (kubeadm's) for
//     the records it gives clients.
//   - forward . /etc/resolv.conf: with dnsPolicy Default the pod's
//     resolv.conf is the node's. Offline there is no upstream to reach: a
//     name outside the cluster domain waits out forward's timeout and gets
//     SERVFAIL, as on a real cluster without internet. Nothing better is
//     honest: answering NXDOMAIN would claim the name does not exist.
//   - cache 30, but not for the cluster domain: a Service created right
//     after a failed lookup of its name (an e2e test's client pod may ask
//     before the Service's watch event arrives) must resolve at once, not
//     after a cached NXDOMAIN expires (30 s, kubernetes' ttl).
//   - loop: kept. If a node's resolv.conf names a loopback resolver
//     (127.0.0.53 under systemd-resolved), forward would send queries back
//     to this CoreDNS in its own network namespace; loop sees its probe
//     return and CoreDNS exits with "Loop ... detected", a crash the pod
//     status shows instead of a server that burns CPU and never answers.
//     With an upstream that does not answer (offline), loop logs its
//     failed probes a few times at start and CoreDNS keeps serving (seen
//     with forward . 192.0.2.1 for 40 s).
//   - reload picks up ConfigMap edits; loadbalance shuffles A records.
//   - prometheus serves metrics on 9153 (the Service's metrics port).
var corefileTemplate = template.Must(template.New("Corefile").Parse(`.:{{.Port}} {
    errors
    health {{.Health}} {
        lameduck 5s
    }
    ready {{.Ready}}
    kubernetes {{.Domain}} in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
{{- if .Kubeconfig}}
        kubeconfig {{.Kubeconfig}}
{{- end}}
    }
    prometheus {{.Metrics}}
    forward . {{.Upstream}}
    cache 30 {
        disable success {{.Domain}}
        disable denial {{.Domain}}
    }
    loop
    reload
    loadbalance
}
`))

// String renders the Corefile.
func (c corefile) String() string {
	var b bytes.Buffer
	if err := corefileTemplate.Execute(&b, c); err != nil {
		panic(err) // the template and its fields are fixed: a bug here, not an input error
	}
	return b.String()
}

// manifestCorefile is the Corefile the pods run.
func manifestCorefile(domain string) corefile {
	return corefile{Domain: domain, Port: dnsPort, Health: healthAddr, Ready: readyAddr, Metrics: metricsAddr,
		Upstream: "/etc/resolv.conf"}
}

// Manifests returns the YAML (objects separated by ---) that gives a
// cluster its DNS: the ServiceAccount, ClusterRole and binding the
// kubernetes plugin needs, the ConfigMap with the Corefile, the CoreDNS
// Deployment running image in kube-system, and the kube-dns Service at
// serviceIP (which must lie in the API server's service range). The
// kubelets' clusterDNS must name serviceIP and their clusterDomain be
// clusterDomain (e.g. cluster.local); image must be in each node's
// containerd (Image builds it), since it is never pulled.
func Manifests(serviceIP, clusterDomain, image string) string {
	var b bytes.Buffer
	err := manifestsTemplate.Execute(&b, struct {
		ServiceIP, Image, Namespace, Service, Deployment, ClusterRole, LabelKey, LabelValue string
		Replicas                                                                            int
		Corefile                                                                            string
	}{
		ServiceIP: serviceIP, Image: image, Namespace: Namespace, Service: ServiceName, Deployment: Deployment,
		ClusterRole: ClusterRole, LabelKey: labelKey, LabelValue: labelValue, Replicas: Replicas,
		Corefile: indent(manifestCorefile(clusterDomain).String(), "    "),
	})
	if err != nil {
		panic(fmt.Sprintf("render the manifests: %v", err)) // fixed template, string fields: a bug
	}
	return b.String()
}

const labelKey, labelValue = "k8s-app", "kube-dns"

// indent prefixes every non-empty line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}

// The objects. The RBAC is what the kubernetes plugin lists and watches:
// Services, EndpointSlices (the records of headless Services), namespaces
// (to answer NXDOMAIN for a namespace that does not exist) and pods (for
// "pods verified"; "pods insecure" does not watch them, the rule costs
// nothing and lets the mode change). The pod runs as root with every
// capability dropped but NET_BIND_SERVICE (port 53) and a read-only root:
// the image holds only /coredns. Tolerations: CriticalAddonsOnly and the
// control-plane taint, so the pods may run on the control-plane node as
// kubeadm's do.
var manifestsTemplate = template.Must(template.New("manifests").Parse(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{.Deployment}}
  namespace: {{.Namespace}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{.ClusterRole}}
rules:
- apiGroups: [""]
  resources: [services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{.ClusterRole}}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{.ClusterRole}}
subjects:
- kind: ServiceAccount
  name: {{.Deployment}}
  namespace: {{.Namespace}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{.Deployment}}
  namespace: {{.Namespace}}
data:
  Corefile: |
{{.Corefile}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{.Deployment}}
  namespace: {{.Namespace}}
  labels:
    {{.LabelKey}}: {{.LabelValue}}
spec:
  replicas: {{.Replicas}}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 1
  selector:
    matchLabels:
      {{.LabelKey}}: {{.LabelValue}}
  template:
    metadata:
      labels:
        {{.LabelKey}}: {{.LabelValue}}
    spec:
      serviceAccountName: {{.Deployment}}
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      nodeSelector:
        kubernetes.io/os: linux
      tolerations:
      - key: CriticalAddonsOnly
        operator: Exists
      - key: node-role.kubernetes.io/control-plane
        effect: NoSchedule
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels:
                  {{.LabelKey}}: {{.LabelValue}}
      containers:
      - name: coredns
        image: {{.Image}}
        imagePullPolicy: IfNotPresent
        args: ["-conf", "/etc/coredns/Corefile"]
        resources:
          requests: {cpu: 100m, memory: 70Mi}
          limits: {memory: 170Mi}
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        - {name: metrics, containerPort: 9153, protocol: TCP}
        - {name: liveness-probe, containerPort: 8080, protocol: TCP}
        - {name: readiness-probe, containerPort: 8181, protocol: TCP}
        livenessProbe:
          httpGet: {path: /health, port: liveness-probe}
          initialDelaySeconds: 60
          timeoutSeconds: 5
          failureThreshold: 5
        readinessProbe:
          httpGet: {path: /ready, port: readiness-probe}
          periodSeconds: 2
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities:
            add: [NET_BIND_SERVICE]
            drop: [ALL]
        volumeMounts:
        - name: config
          mountPath: /etc/coredns
          readOnly: true
      volumes:
      - name: config
        configMap:
          name: {{.Deployment}}
          items:
          - {key: Corefile, path: Corefile}
---
apiVersion: v1
kind: Service
metadata:
  name: {{.Service}}
  namespace: {{.Namespace}}
  labels:
    {{.LabelKey}}: {{.LabelValue}}
    kubernetes.io/name: CoreDNS
spec:
  selector:
    {{.LabelKey}}: {{.LabelValue}}
  clusterIP: {{.ServiceIP}}
  ports:
  - {name: dns, port: 53, targetPort: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 53, protocol: TCP}
  - {name: metrics, port: 9153, targetPort: 9153, protocol: TCP}
`))
