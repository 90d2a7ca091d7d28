package kube

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// PodFacts are what the runtime may not pass to the CNI plugin: the pod's
// annotations, and whether a StatefulSet owns it.
type PodFacts struct {
	Annotations map[string]string
	StatefulSet bool
}

// PodFacts returns the facts of this node's pod namespace/name as the pod
// watch last saw them; uid, when given, must match (a pod of the same name
// that replaced it is not it). ok is false when the pod is unknown or the
// watch is off.
func (l *Link) PodFacts(namespace, name, uid string) (PodFacts, bool) {
	l.mu.Lock()
	store := l.podStore
	l.mu.Unlock()
	if store == nil {
		return PodFacts{}, false
	}
	obj, ok, err := store.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return PodFacts{}, false
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || (uid != "" && string(p.UID) != uid) {
		return PodFacts{}, false
	}
	f := PodFacts{Annotations: maps.Clone(p.Annotations)}
	for _, o := range p.OwnerReferences {
		if o.Kind == "StatefulSet" && o.Controller != nil && *o.Controller {
			f.StatefulSet = true
		}
	}
	return f, true
}

// watchPods starts the watch of this node's pods (spec.nodeName), keeping
// of each only what PodFacts reads.
func (l *Link) watchPods(factory informers.SharedInformerFactory) {
	inf := factory.Core().V1().Pods().Informer()
	if err := inf.SetTransform(slimPod); err != nil {
		l.log.Error("watch pods", "err", err)
		return
	}
	// A pod seen late (its entry may be older) or whose annotations or
	// owners changed wakes the agent; the kubelet's status updates, which
	// the transform leaves no trace of, do not.
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { l.o.OnChange() },
		UpdateFunc: func(old, cur any) {
			o, ok1 := old.(*corev1.Pod)
			c, ok2 := cur.(*corev1.Pod)
			if !ok1 || !ok2 || !maps.Equal(o.Annotations, c.Annotations) || !slices.EqualFunc(o.OwnerReferences, c.OwnerReferences, sameOwner) {
				l.o.OnChange()
			}
		},
	}); err != nil {
		l.log.Error("watch pods", "err", err)
		return
	}
	l.mu.Lock()
	l.podStore = inf.GetStore()
	l.mu.Unlock()
}

// podSelector scopes the pod watch to this node.
func podSelector(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}

// slimPod keeps a pod's identity, annotations and owners: a node's pods
// cost little memory however large their specs.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
		ResourceVersion: p.ResourceVersion, Annotations: p.Annotations, OwnerReferences: p.OwnerReferences}}, nil
}

var _ cache.TransformFunc = slimPod

func sameOwner(a, b metav1.OwnerReference) bool {
	return a.UID == b.UID && a.Kind == b.Kind && (a.Controller != nil && *a.Controller) == (b.Controller != nil && *b.Controller)
}
