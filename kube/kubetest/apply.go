package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Apply applies every object of the YAML files, in order, with server-side
// apply (as `kubectl apply --server-side` does) as fieldManager, and
// returns the objects as the server stored them.
func Apply(ctx context.Context, cfg *rest.Config, fieldManager string, files ...string) ([]*unstructured.Unstructured, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return nil, fmt.Errorf("discover API resources: %w", err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj unstructured.Unstructured
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(obj.Object) == 0 {
				continue
			}
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", f, gvk, err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == "namespace" {
				ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
			}
			got, err := ri.Apply(ctx, obj.GetName(), &obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
			if err != nil {
				return nil, fmt.Errorf("%s: apply %s %s/%s: %w", f, gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
			}
			out = append(out, got)
		}
	}
	return out, nil
}

// RESTConfig returns the client config of token.
func (s *Server) RESTConfig(token string) *rest.Config {
	return &rest.Config{Host: s.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, QPS: 100, Burst: 200}
}
