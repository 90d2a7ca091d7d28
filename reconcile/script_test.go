package reconcile

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/enidnet/enid/cloud/ecssim"
	"github.com/enidnet/enid/desired"
	"github.com/enidnet/enid/reconcile/status"
)

// TestScripts runs the agent on the simulator (real SDK, real files, no
// datapath) from scripts in testdata/*.txt. Commands:
//
//	start                                   write the config (input: YAML after eni:) and start the agent
//	add <pod>...                            write entries, then wake the agent
//	del <pod>...                            remove entries, then wake the agent
//	ready <pod>...                          wait until Ready; print each address
//	ready-count <pod>...                    wait until Ready; print how many, with how many addresses
//	status <pod>...                         wait for nothing left to do; print phase and reason
//	settled                                 wait for an empty plan and no pending timer; print what the node holds
//	calls                                   wait for nothing left to do; print the simulator's mutating calls
//	                                        (ENI calls and failures; successful assigns/unassigns left out)
//	fault <Action> <Code>                   fail the next call of Action with Code
//	restart                                 stop the agent and start a new one
//
// The agent runs with its watcher off and is woken after each change, so
// every burst of entries is seen by one pass and the output is exact.
// Rewrite expectations with -rewrite.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var w *world
		var stop func()
		keys := map[string]desired.Key{}
		defer func() {
			if stop != nil {
				stop()
			}
		}()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "start":
				w = newWorld(t, ecssim.Config{Delays: ecssim.Delays{Attach: 20 * time.Millisecond, Detach: 10 * time.Millisecond, Delete: 10 * time.Millisecond}}, d.Input+"\n")
				w.noWatch = true
				stop = w.start(NewNoDatapathMust(t))
				return "ok"
			case "restart":
				stop()
				stop = w.start(NewNoDatapathMust(t))
				return "ok"
			case "add":
				for _, name := range argWords(d) {
					keys[name] = w.addPod(len(keys))
				}
				w.agent.Wake()
				return "ok"
			case "del":
				for _, name := range argWords(d) {
					if err := desired.NewEntryStore(w.paths.Entries).Remove(keys[name]); err != nil {
						t.Fatal(err)
					}
				}
				w.agent.Wake()
				return "ok"
			case "ready":
				var out strings.Builder
				for _, name := range argWords(d) {
					k := keys[name]
					w.waitFor(name+" ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
					a := w.statuses()[k.String()]
					fmt.Fprintf(&out, "%s %s on %s\n", name, a.IPs[0].Address, a.ENIID)
				}
				return out.String()
			case "ready-count":
				seen := map[string]bool{}
				names := argWords(d)
				for _, name := range names {
					k := keys[name]
					w.waitFor(name+" ready", 20*time.Second, func() bool { return w.statuses()[k.String()].Phase == status.Ready })
					seen[w.statuses()[k.String()].IPs[0].Address.String()] = true
				}
				return fmt.Sprintf("%d ready, %d distinct addresses\n", len(names), len(seen))
			case "status":
				w.waitFor("nothing left to do", 20*time.Second, w.steady)
				var out strings.Builder
				for _, name := range argWords(d) {
					k := keys[name]
					w.waitFor(name+" status", 20*time.Second, func() bool { _, ok := w.statuses()[k.String()]; return ok })
					a := w.statuses()[k.String()]
					fmt.Fprintf(&out, "%s %s %s: %s\n", name, a.Phase, a.ReasonCode, a.Reason)
				}
				return out.String()
			case "settled":
				w.waitFor("an empty plan and no pending timer", 20*time.Second, w.quiet)
				ips, enis := w.ownedIPs()
				_, cfg, err := w.plan()
				if err != nil {
					t.Fatal(err)
				}
				// Where idle settles between the bounds depends on history
				// (a batch's rounding is kept, not released), so the script
				// states the bounds, not the exact count.
				used := 0
				for _, a := range w.statuses() {
					if a.Phase == status.Ready {
						used++
					}
				}
				idle, lo, hi := ips-used, cfg.Pool.MinIdle, max(cfg.Pool.MaxIdle, cfg.Pool.Batch)
				verdict := "within"
				if idle < lo || idle > hi {
					verdict = fmt.Sprintf("OUTSIDE (%d)", idle)
				}
				return fmt.Sprintf("owned: %d ENIs; idle %s [minIdle %d, max(maxIdle, batch) %d]\nstatuses: %d\n", enis, verdict, lo, hi, len(w.statuses()))
			case "calls":
				w.waitFor("nothing left to do", 20*time.Second, w.steady)
				// ENI calls are exact. Whether and how often the pool is
				// topped up or trimmed by single addresses depends on which
				// pass saw which entry (the agent also wakes on its own
				// timers), so assigns and unassigns are left out unless they
				// failed.
				var lines []string
				for action, outcomes := range w.sim.Counters() {
					if strings.HasPrefix(action, "Describe") {
						continue
					}
					for outcome, n := range outcomes {
						if strings.Contains(strings.ToLower(action), "assign") && outcome == "ok" {
							continue
						}
						lines = append(lines, fmt.Sprintf("%s %s %d", action, outcome, n))
					}
				}
				sort.Strings(lines)
				return strings.Join(lines, "\n") + "\n"
			case "fault":
				args := argWords(d)
				w.sim.InjectFault(ecssim.Fault{Action: args[0], Code: args[1]})
				return "ok"
			}
			t.Fatalf("unknown command %q", d.Cmd)
			return ""
		})
		if err := w.sim.Check(); err != nil {
			t.Errorf("simulator invariants: %v", err)
		}
	})
}

// argWords returns the command's arguments as written.
func argWords(d *datadriven.TestData) []string {
	var out []string
	for _, a := range d.CmdArgs {
		s := a.Key
		if len(a.Vals) > 0 {
			s += "=" + strings.Join(a.Vals, ",")
		}
		out = append(out, s)
	}
	return out
}
