// Package kubernetes_test checks the example Kubernetes manifests
// (examples/kubernetes) and the GitOps layout (examples/gitops): every YAML
// document parses, the agent's DaemonSet has the mounts, probes and host
// access the agent needs, every config the ConfigMaps carry decodes
// strictly as an enid AgentConfig, and the files as the kubelet would project
// them load with the agent's own loader (desired.LoadConfig), overrides
// picking the nodes they are meant for. The kustomizations are rendered with
// kubectl and the rendered output is checked too (skipped without kubectl,
// except in CI: kube/kubetest/build.sh builds it beside kube-apiserver).
package kubernetes_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/kube/kubetest"
)

// gitopsDir is the GitOps layout, relative to this package.
const gitopsDir = "../gitops"

func TestEveryDocumentHasAPIVersionAndKind(t *testing.T) {
	docs, err := readDocs(".", gitopsDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 {
		t.Fatalf("found only %d YAML documents; is the walk looking in the right place?", len(docs))
	}
	for _, d := range docs {
		var o object
		if err := convert(d.obj, &o); err != nil || o.APIVersion == "" || o.Kind == "" {
			t.Errorf("%s: apiVersion %q kind %q (err %v)", d.where, o.APIVersion, o.Kind, err)
		}
	}
}

func TestManifests(t *testing.T) {
	docs, err := readDocs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range checkExamples(docs, t.TempDir()) {
		t.Error(p)
	}
}

// kustomization holds the kustomization fields the tests read.
type kustomization struct {
	Resources          []string
	Patches            []struct{ Path string }
	ConfigMapGenerator []struct {
		Name, Namespace, Behavior string
		Files                     []string
		Options                   struct{ DisableNameSuffixHash bool }
	}
	GeneratorOptions struct{ DisableNameSuffixHash bool }
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return k
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	k := readKustomization(t, ".")
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	slices.Sort(files)
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, files) {
		t.Errorf("kustomization resources %v, want every manifest here %v", got, files)
	}
}

// overlays lists the GitOps overlay directories.
func overlays(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(gitopsDir, "overlays", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 2 {
		t.Fatalf("want the production and staging overlays, found %v", dirs)
	}
	return dirs
}

func TestOverlaysAddDropIns(t *testing.T) {
	for _, dir := range overlays(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			k := readKustomization(t, dir)
			for _, r := range k.Resources {
				if _, err := os.Stat(filepath.Join(dir, r)); err != nil {
					t.Errorf("resource %s: %v", r, err)
				}
			}
			for _, p := range k.Patches {
				if _, err := os.Stat(filepath.Join(dir, p.Path)); err != nil {
					t.Errorf("patch %s: %v", p.Path, err)
				}
			}
			if len(k.ConfigMapGenerator) == 0 {
				t.Fatal("no configMapGenerator: an overlay changes the config by adding a drop-in")
			}
			for _, g := range k.ConfigMapGenerator {
				if g.Name != "enid-config" || g.Behavior != "merge" {
					t.Errorf("generator %s behavior %q, want enid-config merged into the base", g.Name, g.Behavior)
				}
				// A hashed name changes the pod template on every edit and
				// restarts every agent instead of reloading the config.
				if !g.Options.DisableNameSuffixHash && !k.GeneratorOptions.DisableNameSuffixHash {
					t.Errorf("generator %s: the ConfigMap name must not get a hash suffix", g.Name)
				}
				for _, f := range g.Files {
					b, err := os.ReadFile(filepath.Join(dir, f))
					if err != nil {
						t.Error(err)
						continue
					}
					var cfg desired.Config
					if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
						t.Errorf("drop-in %s: %v", f, err)
					}
					if cfg.APIVersion != desired.ConfigAPIVersion || cfg.Kind != desired.ConfigKind {
						t.Errorf("drop-in %s: apiVersion %q kind %q", f, cfg.APIVersion, cfg.Kind)
					}
				}
			}
		})
	}
}

// TestRenderedLayouts renders every kustomization with kubectl and checks
// the result as a whole: this is where an overlay's drop-in meets the base's
// volume items. kubectl is the one on PATH, else the one
// kube/kubetest/build.sh built; without either the test skips, except where
// the Kubernetes tests are required (CI), where it fails: an overlay must
// not go unchecked there.
func TestRenderedLayouts(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil && kubetest.BinDir() != "" {
		kubectl, err = exec.LookPath(filepath.Join(kubetest.BinDir(), "kubectl"))
	}
	if err != nil {
		msg := "kubectl not installed nor built by kube/kubetest/build.sh: the kustomizations were checked file by file only"
		if kubetest.Required() {
			t.Fatal(msg + "; it is required here (CI=true or ENID_REQUIRE_KUBE=1)")
		}
		t.Skip(msg)
	}
	dirs := append([]string{".", filepath.Join(gitopsDir, "base")}, overlays(t)...)
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var stderr strings.Builder
			cmd := exec.CommandContext(ctx, kubectl, "kustomize", dir)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr.String())
			}
			docs, err := parseDocs(dir+" (rendered)", out)
			if err != nil {
				t.Fatal(err)
			}
			check := checkLayout
			if dir == "." {
				check = checkExamples
			}
			for _, p := range check(docs, t.TempDir()) {
				t.Error(p)
			}
		})
	}
}

// TestCheckerCatches proves the checks can fail: each case breaks the
// manifests in one way and wants the problem reported.
func TestCheckerCatches(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = string(b)
	}
	tests := []struct {
		name, file, old, new, want string
	}{
		{"subPath", "daemonset.yaml",
			"mountPath: /etc/enid\n", "mountPath: /etc/enid\n              subPath: config.yaml\n",
			"uses subPath"},
		{"no host network", "daemonset.yaml", "hostNetwork: true", "hostNetwork: false", "hostNetwork must be true"},
		{"drop-in not projected", "daemonset.yaml",
			"              - key: 10-overrides.yaml\n                path: config.d/10-overrides.yaml\n", "",
			"key 10-overrides.yaml is not in items"},
		{"drop-in beside config.yaml", "daemonset.yaml",
			"path: config.d/10-overrides.yaml", "path: 10-overrides.yaml", "want config.d/10-overrides.yaml"},
		{"unknown config field", "configmap.yaml", "    mode: shared-eni\n", "    mode: shared-eni\n    poolSize: 3\n",
			`unknown field "poolSize"`},
		{"bad duration", "configmap.yaml", "releaseDelay: 5m", "releaseDelay: 300", "duration must be a string"},
		{"unknown field in an override", "configmap.yaml", "            maxIdle: 40\n", "            maxIdle: 40\n            maxIdel: 40\n",
			`overrides[0].config`},
		{"wrong apiVersion", "configmap.yaml", "    apiVersion: enid.dev/v1alpha1\n    kind: AgentConfig\n    mode",
			"    apiVersion: enid.dev/v1\n    kind: AgentConfig\n    mode", "want enid.dev/v1alpha1"},
		{"netns without propagation", "daemonset.yaml",
			"mountPath: /var/run/netns\n              mountPropagation: HostToContainer\n", "mountPath: /var/run/netns\n",
			"/var/run/netns readOnly false propagation \"\""},
		{"cluster DNS", "daemonset.yaml", "dnsPolicy: Default", "dnsPolicy: ClusterFirstWithHostNet", "dnsPolicy"},
		{"node name missing", "daemonset.yaml", "fieldPath: spec.nodeName", "fieldPath: metadata.name", "NODE_NAME"},
		{"no readiness", "daemonset.yaml", `command: ["enid", "status", "--ready"]`, `command: ["true"]`, "readiness"},
		{"cannot watch nodes", "rbac.yaml", `verbs: ["get", "list", "watch"]`, `verbs: ["get"]`, "cannot watch nodes"},
		{"vSwitch ID the loader refuses", "configmap.yaml", "[vsw-replace-with-zone-i-1]", "[switch-1]", "must be a vSwitch ID"},
		{"override that matches nothing", "configmap.yaml", "node.enid.dev/pool: batch", "node.enid.dev/pool: batches", "batch override not applied"},
		{"sweep with a token", "sweep.yaml", "automountServiceAccountToken: false\n---", "automountServiceAccountToken: true\n---", "no service account token"},
		{"sweep given a role", "rbac.yaml", "  - kind: ServiceAccount\n    name: enid\n", "  - kind: ServiceAccount\n    name: enid\n    namespace: enid-system\n  - kind: ServiceAccount\n    name: enid-sweep\n", "binds enid-sweep"},
		{"sweep twice at once", "sweep.yaml", "concurrencyPolicy: Forbid", "concurrencyPolicy: Allow", "concurrencyPolicy"},
		{"install-cni by shell", "daemonset.yaml", `command: ["enid", "install-cni", "--bin-dir=/host/opt/cni/bin"]`,
			`command: ["/bin/sh", "-ec", "cp /usr/local/bin/enid-cni /host/opt/cni/bin/"]`, "want enid install-cni"},
		{"list written before the agent serves", "daemonset.yaml", `"--bin-dir=/host/opt/cni/bin"]`,
			`"--bin-dir=/host/opt/cni/bin", "--conflist=/usr/share/enid/cni/10-enid.conflist"]`, "no --conflist"},
		{"nothing writes the list", "daemonset.yaml", "            - --cni-conf-dir=/host/etc/cni/net.d\n", "", "stay NotReady"},
		{"conf dir not mounted in the agent", "daemonset.yaml",
			"            - name: cni-conf\n              mountPath: /host/etc/cni/net.d\n", "", "no mount at /host/etc/cni/net.d"},
		{"an image nothing builds", "sweep.yaml", "image: ghcr.io/enidnet/enid:v0.1.0", "image: ghcr.io/enidnet/enid:latest", "what go run ./image tags"},
		{"binding to another account", "rbac.yaml", "    name: enid\n    namespace: enid-system", "    name: default\n    namespace: enid-system", "binding subjects"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(texts[tt.file], tt.old) {
				t.Fatalf("%s no longer contains %q: update the case", tt.file, tt.old)
			}
			var docs []doc
			for _, f := range files {
				text := texts[f]
				if f == tt.file {
					text = strings.Replace(text, tt.old, tt.new, 1)
				}
				ds, err := parseDocs(f, []byte(text))
				if err != nil {
					t.Fatal(err)
				}
				docs = append(docs, ds...)
			}
			problems := checkExamples(docs, t.TempDir())
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }) {
				t.Errorf("want a problem containing %q, got %q", tt.want, problems)
			}
		})
	}
}

// TestKustomizationNamesTheBuiltImage: the kustomization's images entry
// sets the tag `go run ./image` gives (VERSION), under the same name.
func TestKustomizationNamesTheBuiltImage(t *testing.T) {
	want, err := imageRef()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Images []struct{ Name, NewName, NewTag string }
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Images) != 1 || k.Images[0].NewName != "" || k.Images[0].Name+":"+k.Images[0].NewTag != want {
		t.Errorf("kustomization images %+v, want one entry setting %s", k.Images, want)
	}
}

// TestConflistNamesInstalledPlugin checks that the conflist the init
// container installs calls the binary it installs (/opt/cni/bin/enid-cni).
func TestConflistNamesInstalledPlugin(t *testing.T) {
	b, err := os.ReadFile("../cni/10-enid.conflist")
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("examples/cni/10-enid.conflist is not written yet")
	}
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatalf("10-enid.conflist: %v", err)
	}
	if !slices.ContainsFunc(conf.Plugins, func(p struct {
		Type string `json:"type"`
	}) bool {
		return p.Type == "enid-cni"
	}) {
		t.Errorf("10-enid.conflist plugins %+v: none has type enid-cni, the binary install-cni puts in /opt/cni/bin", conf.Plugins)
	}
}
