package main

import (
	"errors"
	"io/fs"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/enidnet/enid/reconcile/status"
)

// status answers the CNI STATUS verb from the agent heartbeat: success when
// the agent is ready and its heartbeat is fresher than heartbeatMaxAge,
// else error 50 (plugin not available) with the reason.
func (p *plugin) status(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	a, err := status.ReadAgent(conf.AgentFile)
	if errors.Is(err, fs.ErrNotExist) {
		return types.NewError(types.ErrPluginNotAvailable, "enid agent is not running: no heartbeat at "+conf.AgentFile, "")
	}
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "enid agent heartbeat unreadable", err.Error())
	}
	if err := a.Serving(p.now(), conf.heartbeatMaxAge); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, err.Error(), "")
	}
	return nil
}
