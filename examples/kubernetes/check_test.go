package kubernetes_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/enidnet/enid/desired"
)

// doc is one YAML document of a file.
type doc struct {
	// where names the file and the document's index in it.
	where string
	// raw is the document's text.
	raw []byte
	// obj is the document as generic JSON-able data.
	obj map[string]any
}

// docSeparator matches a YAML document separator line.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// parseDocs splits text on "---" lines and parses every non-empty document.
func parseDocs(name string, text []byte) ([]doc, error) {
	var docs []doc
	for i, part := range docSeparator.Split(string(text), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(part), &obj); err != nil {
			return nil, fmt.Errorf("%s document %d: %w", name, i, err)
		}
		if obj == nil { // only comments or blank
			continue
		}
		docs = append(docs, doc{where: fmt.Sprintf("%s#%d", name, i), raw: []byte(part), obj: obj})
	}
	return docs, nil
}

// readDocs parses every .yaml and .yml file under the roots.
func readDocs(roots ...string) ([]doc, error) {
	var docs []doc
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if ext := filepath.Ext(path); ext != ".yaml" && ext != ".yml" {
				return nil
			}
			text, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			ds, err := parseDocs(path, text)
			docs = append(docs, ds...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return docs, nil
}

// The types below hold the few fields the checks read. Field names match the
// Kubernetes JSON names case-insensitively, as encoding/json does.

type meta struct {
	Name      string
	Namespace string
}

type object struct {
	APIVersion string
	Kind       string
	Metadata   meta
}

type daemonSet struct {
	Metadata meta
	Spec     struct {
		UpdateStrategy struct {
			Type          string
			RollingUpdate struct{ MaxUnavailable any }
		}
		Template struct{ Spec podSpec }
	}
}

type podSpec struct {
	ServiceAccountName string
	PriorityClassName  string
	HostNetwork        bool
	HostPID            bool
	DNSPolicy          string
	Tolerations        []struct{ Key, Operator, Effect string }
	InitContainers     []container
	Containers         []container
	Volumes            []volume
}

type container struct {
	Name           string
	Image          string
	Command        []string
	Args           []string
	Env            []envVar
	ReadinessProbe *struct {
		Exec *struct{ Command []string }
	}
	SecurityContext *struct{ Privileged bool }
	VolumeMounts    []volumeMount
}

type envVar struct {
	Name      string
	Value     string
	ValueFrom *struct {
		FieldRef     *struct{ FieldPath string }
		SecretKeyRef *struct {
			Name, Key string
			Optional  bool
		}
	}
}

type volumeMount struct {
	Name, MountPath, SubPath, SubPathExpr, MountPropagation string
	ReadOnly                                                bool
}

type volume struct {
	Name      string
	ConfigMap *struct {
		Name  string
		Items []keyPath
	}
	HostPath *struct{ Path, Type string }
}

// keyPath is one item of a ConfigMap volume.
type keyPath struct{ Key, Path string }

type configMap struct {
	Metadata meta
	Data     map[string]string
}

type clusterRole struct {
	Metadata meta
	Rules    []struct{ APIGroups, Resources, Verbs []string }
}

// cronJob holds the sweep CronJob's fields the checks read.
type cronJob struct {
	Metadata meta
	Spec     struct {
		ConcurrencyPolicy string
		JobTemplate       struct {
			Spec struct {
				Template struct {
					Spec struct {
						podSpec
						AutomountServiceAccountToken *bool
					}
				}
			}
		}
	}
}

type clusterRoleBinding struct {
	RoleRef  struct{ Kind, Name string }
	Subjects []struct{ Kind, Name, Namespace string }
}

// hostMount is what one host path mount of the agent must look like.
type hostMount struct {
	hostPath    string
	readOnly    bool
	propagation string
}

// agentHostMounts are the agent's host mounts by container path (see
// docs/deploy.md for why each exists and is mounted this way).
var agentHostMounts = map[string]hostMount{
	"/run/enid":            {hostPath: "/run/enid"},
	"/var/lib/enid":        {hostPath: "/var/lib/enid"},
	"/var/lib/kubelet":     {hostPath: "/var/lib/kubelet", readOnly: true, propagation: "HostToContainer"},
	"/var/lib/cni/results": {hostPath: "/var/lib/cni/results", readOnly: true},
	"/var/run/netns":       {hostPath: "/var/run/netns", propagation: "HostToContainer"},
	// The agent writes the CNI network list there once it serves.
	"/host/etc/cni/net.d": {hostPath: "/etc/cni/net.d"},
}

// configDir is where the agent reads config.yaml and config.d/.
const configDir = "/etc/enid"

// checker collects problems with one deployable layout.
type checker struct {
	// scratch is a directory for the config files the kubelet would
	// project, so the real loader can read them.
	scratch  string
	problems []string
	// wantImage is the image every container must run ("": not checked).
	wantImage string
}

func (c *checker) errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// one decodes the single object of the given kind (and name, if set).
func (c *checker) one(docs []doc, kind, name string, into any) bool {
	var found []doc
	for _, d := range docs {
		var o object
		if err := convert(d.obj, &o); err == nil && o.Kind == kind && (name == "" || o.Metadata.Name == name) {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		c.errorf("want exactly one %s %q, found %d", kind, name, len(found))
		return false
	}
	if err := convert(found[0].obj, into); err != nil {
		c.errorf("%s: decode %s: %v", found[0].where, kind, err)
		return false
	}
	return true
}

// convert re-decodes generic data into a typed value.
func convert(obj map[string]any, into any) error {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	return yaml.Unmarshal(b, into)
}

// checkLayout returns every problem found with a complete set of manifests
// (examples/kubernetes, or the rendered output of a kustomization). It
// writes files under scratch.
func checkLayout(docs []doc, scratch string) []string {
	return checkLayoutOf(docs, scratch, "")
}

// checkExamples is checkLayout for examples/kubernetes as shipped: every
// container also runs the image `go run ./image` tags.
func checkExamples(docs []doc, scratch string) []string {
	want, err := imageRef()
	if err != nil {
		return []string{fmt.Sprintf("read VERSION: %v", err)}
	}
	return checkLayoutOf(docs, scratch, want)
}

func checkLayoutOf(docs []doc, scratch, wantImage string) []string {
	c := &checker{scratch: scratch, wantImage: wantImage}
	for _, d := range docs {
		var o object
		if err := convert(d.obj, &o); err != nil || o.APIVersion == "" || o.Kind == "" {
			c.errorf("%s: apiVersion and kind must be set (err %v)", d.where, err)
		}
	}
	var (
		ds   daemonSet
		cm   configMap
		sa   object
		role clusterRole
		bind clusterRoleBinding
		ns   object
	)
	okDS := c.one(docs, "DaemonSet", "enid", &ds)
	okCM := c.one(docs, "ConfigMap", "enid-config", &cm)
	okSA := c.one(docs, "ServiceAccount", "enid", &sa)
	okRole := c.one(docs, "ClusterRole", "", &role)
	okBind := c.one(docs, "ClusterRoleBinding", "", &bind)
	if c.one(docs, "Namespace", "", &ns) && okDS && ns.Metadata.Name != ds.Metadata.Namespace {
		c.errorf("namespace %q is not the DaemonSet's %q", ns.Metadata.Name, ds.Metadata.Namespace)
	}
	if okCM {
		c.checkConfigMap(cm)
	}
	if okRole {
		c.checkRole(role)
	}
	if okSA && okRole && okBind {
		if bind.RoleRef.Kind != "ClusterRole" || bind.RoleRef.Name != role.Metadata.Name {
			c.errorf("binding refers to %s %q, want ClusterRole %q", bind.RoleRef.Kind, bind.RoleRef.Name, role.Metadata.Name)
		}
		if len(bind.Subjects) != 1 || bind.Subjects[0].Kind != "ServiceAccount" ||
			bind.Subjects[0].Name != sa.Metadata.Name || bind.Subjects[0].Namespace != sa.Metadata.Namespace {
			c.errorf("binding subjects %+v, want ServiceAccount %s/%s", bind.Subjects, sa.Metadata.Namespace, sa.Metadata.Name)
		}
	}
	if okDS {
		c.checkDaemonSet(ds)
		if okSA && (ds.Spec.Template.Spec.ServiceAccountName != sa.Metadata.Name || ds.Metadata.Namespace != sa.Metadata.Namespace) {
			c.errorf("DaemonSet runs as %q in %q, want ServiceAccount %s/%s",
				ds.Spec.Template.Spec.ServiceAccountName, ds.Metadata.Namespace, sa.Metadata.Namespace, sa.Metadata.Name)
		}
	}
	if okDS && okCM {
		c.checkConfigVolume(ds.Spec.Template.Spec, cm)
	}
	var sweep cronJob
	var sweepSA struct {
		Metadata                     meta
		AutomountServiceAccountToken *bool
	}
	if c.one(docs, "CronJob", "enid-sweep", &sweep) && c.one(docs, "ServiceAccount", "enid-sweep", &sweepSA) {
		c.checkSweep(docs, sweep, sweepSA.AutomountServiceAccountToken)
	}
	return c.problems
}

// checkSweep checks the sweep CronJob: `enid sweep` one run at a time, on
// the host network, as its own ServiceAccount with no token and no role
// (it needs nothing of the Kubernetes API), reading config.yaml.
func (c *checker) checkSweep(docs []doc, cj cronJob, saToken *bool) {
	spec := cj.Spec.JobTemplate.Spec.Template.Spec
	if cj.Spec.ConcurrencyPolicy != "Forbid" {
		c.errorf("sweep: concurrencyPolicy %q, want Forbid", cj.Spec.ConcurrencyPolicy)
	}
	if spec.ServiceAccountName != "enid-sweep" {
		c.errorf("sweep: runs as %q, want its own ServiceAccount enid-sweep", spec.ServiceAccountName)
	}
	if saToken == nil || *saToken || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		c.errorf("sweep: must mount no service account token (automountServiceAccountToken: false on the account and the pod)")
	}
	for _, d := range docs {
		var b struct {
			object
			clusterRoleBinding
		}
		if err := convert(d.obj, &b); err != nil || (b.Kind != "RoleBinding" && b.Kind != "ClusterRoleBinding") {
			continue
		}
		for _, sub := range b.Subjects {
			if sub.Kind == "ServiceAccount" && sub.Name == "enid-sweep" {
				c.errorf("sweep: %s %s binds enid-sweep to a role: the sweep needs no Kubernetes API", b.Kind, b.Metadata.Name)
			}
		}
	}
	if !spec.HostNetwork {
		c.errorf("sweep: hostNetwork must be true (it must not depend on the pod network)")
	}
	if len(spec.Containers) != 1 {
		c.errorf("sweep: want one container, have %d", len(spec.Containers))
		return
	}
	c.checkImages(spec.podSpec)
	ct := spec.Containers[0]
	if cmd := slices.Concat(ct.Command, ct.Args); len(cmd) < 2 || cmd[0] != "enid" || cmd[1] != "sweep" || slices.Contains(cmd, "--dry-run") {
		c.errorf("sweep: command %q, want enid sweep", cmd)
	}
	if ct.SecurityContext != nil && ct.SecurityContext.Privileged {
		c.errorf("sweep: must not be privileged")
	}
	v := volumeNamed(spec.Volumes, "config")
	if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != "enid-config" ||
		!slices.ContainsFunc(v.ConfigMap.Items, func(it keyPath) bool { return it.Key == "config.yaml" && it.Path == "config.yaml" }) {
		c.errorf("sweep: must mount config.yaml of ConfigMap enid-config")
	}
}

// checkConfigMap decodes every key strictly as an enid AgentConfig.
func (c *checker) checkConfigMap(cm configMap) {
	if _, ok := cm.Data["config.yaml"]; !ok {
		c.errorf("ConfigMap %s has no config.yaml key", cm.Metadata.Name)
	}
	for _, key := range slices.Sorted(maps.Keys(cm.Data)) {
		var cfg desired.Config
		if err := yaml.UnmarshalStrict([]byte(cm.Data[key]), &cfg); err != nil {
			c.errorf("ConfigMap key %s: %v", key, err)
			continue
		}
		if cfg.APIVersion != desired.ConfigAPIVersion || cfg.Kind != desired.ConfigKind {
			c.errorf("ConfigMap key %s: apiVersion %q kind %q, want %s %s",
				key, cfg.APIVersion, cfg.Kind, desired.ConfigAPIVersion, desired.ConfigKind)
		}
		for i, o := range cfg.Overrides {
			var part desired.Config
			if err := yaml.UnmarshalStrict(o.Config, &part); err != nil {
				c.errorf("ConfigMap key %s: overrides[%d].config: %v", key, i, err)
			}
		}
	}
}

// checkRole wants nodes readable, node status patchable and events
// creatable (the kube link's needs; the real-API test proves they suffice).
func (c *checker) checkRole(role clusterRole) {
	allows := func(group, resource, verb string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, verb := range []string{"get", "list", "watch"} {
		if !allows("", "nodes", verb) {
			c.errorf("ClusterRole cannot %s nodes", verb)
		}
	}
	for _, verb := range []string{"create", "patch"} {
		if !allows("", "events", verb) {
			c.errorf("ClusterRole cannot %s events", verb)
		}
	}
	if !allows("", "nodes", "patch") {
		c.errorf("ClusterRole cannot patch nodes (the startup taint)")
	}
	if !allows("", "nodes/status", "patch") {
		c.errorf("ClusterRole cannot patch nodes/status (capacity and condition)")
	}
}

// checkDaemonSet checks the agent's pod: node-wide, privileged, host network.
func (c *checker) checkDaemonSet(ds daemonSet) {
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork {
		c.errorf("DaemonSet: hostNetwork must be true")
	}
	if !spec.HostPID {
		c.errorf("DaemonSet: hostPID must be true (netns paths under /proc name host PIDs)")
	}
	if spec.DNSPolicy != "Default" {
		c.errorf("DaemonSet: dnsPolicy %q, want Default: cluster DNS runs in pods that need this agent first", spec.DNSPolicy)
	}
	if spec.PriorityClassName != "system-node-critical" {
		c.errorf("DaemonSet: priorityClassName %q, want system-node-critical", spec.PriorityClassName)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(t struct{ Key, Operator, Effect string }) bool {
		return t.Key == "" && t.Effect == "" && t.Operator == "Exists"
	}) {
		c.errorf("DaemonSet: must tolerate every taint (operator Exists, no key, no effect)")
	}
	if us := ds.Spec.UpdateStrategy; us.Type != "RollingUpdate" || us.RollingUpdate.MaxUnavailable != "10%" {
		c.errorf("DaemonSet: updateStrategy %s maxUnavailable %v, want RollingUpdate 10%%", us.Type, us.RollingUpdate.MaxUnavailable)
	}
	for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, m := range ct.VolumeMounts {
			if m.SubPath != "" || m.SubPathExpr != "" {
				c.errorf("container %s: mount %s uses subPath: updates would never arrive", ct.Name, m.MountPath)
			}
		}
	}
	if len(spec.Containers) != 1 {
		c.errorf("DaemonSet: want one container, have %d", len(spec.Containers))
		return
	}
	agent := spec.Containers[0]
	if cmd := slices.Concat(agent.Command, agent.Args); len(cmd) < 2 || cmd[0] != "enid" || cmd[1] != "run" ||
		!slices.Contains(cmd, "--metrics-addr=127.0.0.1:9090") {
		c.errorf("agent: command %q, want enid run --metrics-addr=127.0.0.1:9090", cmd)
	}
	if p := agent.ReadinessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"enid", "status", "--ready"}) {
		c.errorf("agent: readiness must exec enid status --ready")
	}
	if agent.SecurityContext == nil || !agent.SecurityContext.Privileged {
		c.errorf("agent: must be privileged (netlink, netns)")
	}
	c.checkEnv(agent.Env)
	mounts := map[string]volumeMount{}
	for _, m := range agent.VolumeMounts {
		mounts[m.MountPath] = m
	}
	for _, path := range slices.Sorted(maps.Keys(agentHostMounts)) {
		want := agentHostMounts[path]
		m, ok := mounts[path]
		if !ok {
			c.errorf("agent: no mount at %s", path)
			continue
		}
		v := volumeNamed(spec.Volumes, m.Name)
		if v == nil || v.HostPath == nil || v.HostPath.Path != want.hostPath {
			c.errorf("agent: %s must mount hostPath %s", path, want.hostPath)
		}
		if m.ReadOnly != want.readOnly || m.MountPropagation != want.propagation {
			c.errorf("agent: %s readOnly %v propagation %q, want %v %q", path, m.ReadOnly, m.MountPropagation, want.readOnly, want.propagation)
		}
	}
	if len(spec.InitContainers) != 1 {
		c.errorf("DaemonSet: want one init container (install-cni), have %d", len(spec.InitContainers))
		return
	}
	install := spec.InitContainers[0]
	if install.Image != agent.Image {
		c.errorf("install-cni image %q differs from the agent's %q: plugin and agent must be one release", install.Image, agent.Image)
	}
	// enid install-cni, no shell (the image has none), into the host's
	// bin dir; never the list: the agent writes it once it serves, so the
	// kubelet's NotReady gate holds until then.
	cmd := slices.Concat(install.Command, install.Args)
	if len(cmd) < 2 || cmd[0] != "enid" || cmd[1] != "install-cni" || !slices.Contains(cmd, "--bin-dir=/host/opt/cni/bin") ||
		slices.ContainsFunc(cmd, func(a string) bool { return strings.HasPrefix(a, "--conflist") }) {
		c.errorf("install-cni: command %q, want enid install-cni --bin-dir=/host/opt/cni/bin (no --conflist: the agent writes the list once it serves)", cmd)
	}
	hosts := map[string]string{}
	for _, m := range install.VolumeMounts {
		if v := volumeNamed(spec.Volumes, m.Name); v != nil && v.HostPath != nil {
			hosts[m.MountPath] = v.HostPath.Path
		}
	}
	if want := map[string]string{"/host/opt/cni/bin": "/opt/cni/bin"}; !maps.Equal(hosts, want) {
		c.errorf("install-cni host mounts %v, want %v", hosts, want)
	}
	if args := slices.Concat(agent.Command, agent.Args); !slices.Contains(args, "--cni-conf-dir=/host/etc/cni/net.d") {
		c.errorf("agent: command %q lacks --cni-conf-dir=/host/etc/cni/net.d: nothing would write the network list and the node would stay NotReady", args)
	}
	c.checkImages(spec)
}

// imageRef is the image `go run ./image` tags: its default name and the
// VERSION file (image/image_test.go checks the builder's side).
func imageRef() (string, error) {
	v, err := os.ReadFile("../../VERSION")
	if err != nil {
		return "", err
	}
	return "ghcr.io/enidnet/enid:" + strings.TrimSpace(string(v)), nil
}

// checkImages wants every container on the image the builder tags, when
// the layout is examples/kubernetes itself (an overlay may stage another
// release).
func (c *checker) checkImages(spec podSpec) {
	if c.wantImage == "" {
		return
	}
	for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
		if ct.Image != c.wantImage {
			c.errorf("container %s: image %q, want %s (what go run ./image tags)", ct.Name, ct.Image, c.wantImage)
		}
	}
}

// checkEnv wants the node name from the downward API and the optional
// credential Secret.
func (c *checker) checkEnv(env []envVar) {
	byName := map[string]envVar{}
	for _, e := range env {
		byName[e.Name] = e
	}
	if e := byName["NODE_NAME"]; e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		c.errorf("agent: NODE_NAME must come from fieldRef spec.nodeName")
	}
	for _, name := range []string{"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"} {
		e := byName[name]
		if e.Value != "" {
			c.errorf("agent: %s must never be a literal", name)
		}
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != name || !e.ValueFrom.SecretKeyRef.Optional {
			c.errorf("agent: %s must come from an optional Secret key of that name", name)
		}
	}
}

// checkConfigVolume wants the ConfigMap mounted as a directory at /etc/enid
// with every key projected: config.yaml at the top, the rest in config.d/.
func (c *checker) checkConfigVolume(spec podSpec, cm configMap) {
	var mount *volumeMount
	for i, m := range spec.Containers[0].VolumeMounts {
		if m.MountPath == configDir {
			mount = &spec.Containers[0].VolumeMounts[i]
		}
	}
	if mount == nil {
		c.errorf("agent: no mount at %s", configDir)
		return
	}
	if !mount.ReadOnly {
		c.errorf("agent: %s must be read-only", configDir)
	}
	v := volumeNamed(spec.Volumes, mount.Name)
	if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != cm.Metadata.Name {
		c.errorf("agent: %s must be ConfigMap %s", configDir, cm.Metadata.Name)
		return
	}
	projected := map[string]bool{}
	for _, it := range v.ConfigMap.Items {
		want := "config.d/" + it.Key
		if it.Key == "config.yaml" {
			want = "config.yaml"
		}
		if it.Path != want {
			c.errorf("config volume: key %s lands at %s, want %s", it.Key, it.Path, want)
		}
		if _, ok := cm.Data[it.Key]; !ok {
			c.errorf("config volume: item %s is not a key of ConfigMap %s (the pod would not start)", it.Key, cm.Metadata.Name)
		}
		projected[it.Key] = true
	}
	for _, key := range slices.Sorted(maps.Keys(cm.Data)) {
		if !projected[key] {
			c.errorf("config volume: ConfigMap key %s is not in items: the agent would never see it", key)
		}
	}
	c.loadAsAgent(v.ConfigMap.Items, cm)
}

func volumeNamed(vs []volume, name string) *volume {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i]
		}
	}
	return nil
}
