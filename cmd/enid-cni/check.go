package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// errCheckFailed is enid's own CNI error code (100+ are the plugin's):
// CHECK found the attachment different from what it should be.
const errCheckFailed uint = 100

// check verifies that the entry is still there, that the agent's status
// answers its current revision with Ready and the addresses the runtime
// holds (prevResult), and that the interface exists in the pod's netns with
// those addresses (and MAC).
func (p *plugin) check(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := attachmentArgs(args, true); err != nil {
		return err
	}
	key := desired.Key{ContainerID: args.ContainerID, IfName: args.IfName}
	e, err := conf.entries().Read(key)
	if errors.Is(err, fs.ErrNotExist) {
		return types.NewError(types.ErrUnknownContainer, "no pod entry for "+key.String(), "")
	}
	if err != nil {
		return entryError("read pod entry "+key.String(), err)
	}
	st, err := conf.statuses().Read(args.ContainerID, args.IfName)
	if errors.Is(err, fs.ErrNotExist) {
		return checkFailed("the agent published no status for "+key.String(), agentState(conf, p.now()))
	}
	if err != nil {
		return checkFailed("read status", err.Error())
	}
	if st.Revision != e.Revision {
		return checkFailed(fmt.Sprintf("the status answers entry revision %q, the entry is at %q", st.Revision, e.Revision), "")
	}
	if st.Phase != status.Ready {
		return checkFailed(fmt.Sprintf("attachment is %s: %s", st.Phase, reason(st)), "")
	}
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
			return types.NewError(types.ErrDecodingFailure, "decode prevResult", err.Error())
		}
		prev, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return types.NewError(types.ErrDecodingFailure, "convert prevResult", err.Error())
		}
		var had []string
		for _, ip := range prev.IPs {
			had = append(had, ip.Address.String())
		}
		if want := statusAddrs(st); !sameSet(had, want) {
			return checkFailed(fmt.Sprintf("the runtime holds addresses %v, the agent says %v", had, want), "")
		}
	}
	err = ns.WithNetNSPath(args.Netns, func(ns.NetNS) error { return inspect(args.IfName, st) })
	if err != nil {
		return checkFailed(fmt.Sprintf("netns %s", args.Netns), err.Error())
	}
	return nil
}

// inspect runs inside the pod's netns: the interface must exist, be the
// right one, and hold every address of the status.
func inspect(ifName string, st status.Attachment) error {
	ifc, err := net.InterfaceByName(ifName)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifName, err)
	}
	if st.Interface.MAC != "" && !strings.EqualFold(ifc.HardwareAddr.String(), st.Interface.MAC) {
		return fmt.Errorf("interface %s has MAC %s, want %s", ifName, ifc.HardwareAddr, st.Interface.MAC)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", ifName, err)
	}
	var have []netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				have = append(have, ip.Unmap())
			}
		}
	}
	var missing []string
	for _, ip := range st.IPs {
		if !slices.Contains(have, ip.Address.Addr()) {
			missing = append(missing, ip.Address.Addr().String())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("interface %s lacks %s (has %v)", ifName, strings.Join(missing, ", "), have)
	}
	return nil
}

func statusAddrs(st status.Attachment) []string {
	var out []string
	for _, ip := range st.IPs {
		out = append(out, ipNet(ip.Address).String())
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func checkFailed(msg, details string) error {
	return types.NewError(errCheckFailed, "CHECK: "+msg, details)
}
