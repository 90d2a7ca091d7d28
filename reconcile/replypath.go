package reconcile

import (
	"context"

	"github.com/enidnet/enid/linux"
	"github.com/enidnet/enid/observed"
)

// replyPather is a datapath that keeps the reply path of connections that
// entered through the node's primary interface (linux.Datapath: the
// nftables connection mark and the fwmark rule, docs/datapath.md
// "Services"). NoDatapath has none.
type replyPather interface {
	EnsureReplyPath(ctx context.Context, s linux.ReplyPathSpec) (linux.Changes, error)
}

// ensureReplyPath puts the reply path in place, or repairs it, after a
// complete observation (at start, then every resync): it names the
// primary interface by the primary ENI's MAC, which only the cloud's half
// of the observation knows. It is not a planned action: it depends on no
// pod or ENI, and is the same on every node. A failure (the primary's
// device not found, nftables refused) is logged and tried again at the
// next full observation; it never holds up pods.
func (a *Agent) ensureReplyPath(ctx context.Context, st observed.State) {
	rp, ok := a.cfg.Datapath.(replyPather)
	if !ok || !st.Complete {
		return
	}
	mac := ""
	for _, e := range st.ENIs {
		if e.ID == st.Instance.PrimaryENI {
			mac = e.MAC
		}
	}
	if mac == "" {
		a.log.Warn("reply path: the primary ENI's MAC is not known", "eni", st.Instance.PrimaryENI)
		return
	}
	if _, err := rp.EnsureReplyPath(ctx, linux.ReplyPathSpec{PrimaryMAC: mac}); err != nil {
		a.log.Warn("reply path for connections entering on the primary interface", "mac", mac, "err", err)
	}
}
