// Command enid-cni is enid's CNI plugin. It only writes the desired pod
// attachment entry (/run/enid/pods) and waits for the agent's status
// (/run/enid/status); it holds no cloud SDK and no netlink, and a test
// fails if it ever imports them. See docs/cni.md for its config keys,
// verbs and error codes.
package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

// about is what VERSION and error messages call the plugin.
const about = "enid-cni: enid CNI plugin (writes the pod entry, waits for the agent)"

func main() {
	p := &plugin{
		// The real clock throughout the plugin: it runs once per CNI
		// call and times its own waits for the agent (add.go, del.go)
		// against the runtime's real deadline; it shares no clock with
		// the agent but the files' times.
		now: time.Now,
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    p.add,
		Del:    p.del,
		Check:  p.check,
		GC:     p.gc,
		Status: p.status,
	}, version.PluginSupports("1.0.0", "1.1.0"), about)
}

// plugin carries what every verb needs from outside: the clock and the
// logger. One process serves one verb and exits.
type plugin struct {
	now func() time.Time
	// log writes to stderr, which runtimes keep beside the error.
	log *slog.Logger
}
