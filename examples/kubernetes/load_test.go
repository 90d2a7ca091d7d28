package kubernetes_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/enidnet/enid/desired"
)

// loadAsAgent writes the projected files as the kubelet would lay them out
// under /etc/enid and loads them with the agent's own loader, for a few
// kinds of node, checking that the example overrides pick the nodes meant.
func (c *checker) loadAsAgent(items []keyPath, cm configMap) {
	dir, err := os.MkdirTemp(c.scratch, "etc-enid-")
	if err != nil {
		c.errorf("scratch dir: %v", err)
		return
	}
	for _, it := range items {
		file := filepath.Join(dir, filepath.FromSlash(it.Path))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			c.errorf("write %s: %v", it.Path, err)
			return
		}
		if err := os.WriteFile(file, []byte(cm.Data[it.Key]), 0o644); err != nil {
			c.errorf("write %s: %v", it.Path, err)
			return
		}
	}
	src := desired.ConfigSource{Main: filepath.Join(dir, "config.yaml"), DropInDir: filepath.Join(dir, "config.d")}
	nodes := []struct {
		facts desired.NodeFacts
		check func(desired.Config) string
	}{
		{desired.NodeFacts{NodeName: "plain", Zone: "cn-hangzhou-h", InstanceType: "ecs.g6.xlarge", Labels: map[string]string{}}, nil},
		{desired.NodeFacts{NodeName: "batch", Zone: "cn-hangzhou-i", InstanceType: "ecs.g6.xlarge",
			Labels: map[string]string{"node.enid.dev/pool": "batch"}}, func(cfg desired.Config) string {
			if cfg.Pool.MinIdle != 10 || cfg.Pool.MaxIdle != 40 {
				return fmt.Sprintf("batch override not applied: pool.minIdle %d maxIdle %d, want 10 40", cfg.Pool.MinIdle, cfg.Pool.MaxIdle)
			}
			return ""
		}},
		{desired.NodeFacts{NodeName: "small", Zone: "cn-hangzhou-h", InstanceType: "ecs.g7.large", Labels: map[string]string{}},
			func(cfg desired.Config) string {
				if cfg.ENI.MaxENIs != 2 {
					return fmt.Sprintf("ecs.g7.large override not applied: eni.maxENIs %d, want 2", cfg.ENI.MaxENIs)
				}
				return ""
			}},
	}
	for _, n := range nodes {
		cfg, err := desired.LoadConfig(src, n.facts)
		if err != nil {
			c.errorf("agent on node %s would refuse the config: %v", n.facts.NodeName, err)
			continue
		}
		if n.check != nil {
			if p := n.check(cfg); p != "" {
				c.errorf("node %s: %s", n.facts.NodeName, p)
			}
		}
	}
}
