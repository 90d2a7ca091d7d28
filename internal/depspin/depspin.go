// Package depspin pins the project's chosen dependencies in go.mod while the
// packages that use them are being written, so parallel work does not race
// on go.mod. It is removed once every dependency has a real importer.
package depspin

import (
	_ "github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	_ "github.com/aliyun/alibaba-cloud-sdk-go/sdk/auth/credentials"
	_ "github.com/aliyun/alibaba-cloud-sdk-go/services/ecs"
	_ "github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"
	_ "github.com/cockroachdb/datadriven"
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/cni/pkg/types/100"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/containernetworking/plugins/pkg/testutils"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/hashicorp/go-multierror"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/spf13/cobra"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "sigs.k8s.io/yaml"
)
