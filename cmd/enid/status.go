package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile/status"
)

// statusReport is `enid status --output json`.
type statusReport struct {
	Agent    *status.Agent `json:"agent,omitempty"`
	AgentErr string        `json:"agentError,omitempty"`
	// AgentProcess says whether the heartbeat's writer still runs:
	// "running", "not running" or "unknown" (status.Process).
	AgentProcess string              `json:"agentProcess,omitempty"`
	Pods         []status.Attachment `json:"pods"`
	Problems     []string            `json:"problems,omitempty"`
}

func newStatusCmd() *cobra.Command {
	var (
		runDir string
		output string
		ready  bool
		maxAge time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the agent's heartbeat, pool, pods by phase and last errors",
		Long: `Read what the agent publishes (/run/enid/agent.json and /run/enid/status/)
and show it: readiness, the pool (total, used, idle, cooldown, sticky, ENIs),
pods by phase with their addresses and reasons, and the last errors.

--ready only checks readiness and exits 0 (ready) or 1 (not ready, the
heartbeat is older than --max-age, or the agent process that wrote it is
gone): the DaemonSet's readiness probe. A killed agent leaves a fresh
heartbeat behind; the agent holds a lock (agent.lock, beside agent.json)
for as long as it runs, which the kernel releases when it dies, so a
heartbeat whose lock is free fails at once ("agent process not running
(pid N)"), however young. Where the lock cannot be opened, the pid is looked
up in /proc (in the agent's own pid namespace only, and only as the process
that started at the time the heartbeat records).`,
		Example: `  enid status
  enid status -o json | jq '.pods[] | select(.phase != "Ready")'
  enid status --ready`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agentFile := filepath.Join(runDir, "agent.json")
			if ready {
				a, err := status.ReadAgent(agentFile)
				if err != nil {
					return &exitError{code: 1, err: fmt.Errorf("not ready: %w", err)}
				}
				// The wall clock: the files were written by an agent on the real
				// clock, and the operator asks about the present.
				if err := a.Serving(time.Now(), maxAge); err != nil {
					return &exitError{code: 1, err: fmt.Errorf("not ready: %w", err)}
				}
				fmt.Fprintln(cmd.OutOrStdout(), "ready")
				return nil
			}
			var rep statusReport
			if a, err := status.ReadAgent(agentFile); err != nil {
				rep.AgentErr = err.Error()
			} else {
				rep.Agent = &a
				rep.AgentProcess = a.Process.String()
			}
			pods, problems, err := status.NewStore(filepath.Join(runDir, "status")).ReadAll()
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			rep.Pods = pods
			if rep.Pods == nil {
				rep.Pods = []status.Attachment{}
			}
			for _, p := range problems {
				rep.Problems = append(rep.Problems, fmt.Sprint(p))
			}
			switch output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			case "text":
				printStatus(cmd.OutOrStdout(), rep, time.Now()) // ages by the wall clock, as above
				return nil
			}
			return fmt.Errorf("--output %q: use text or json", output)
		},
	}
	cmd.Flags().StringVar(&runDir, "run-dir", "/run/enid", "the agent's run directory")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVar(&ready, "ready", false, "only check readiness: exit 0 when the agent is ready")
	cmd.Flags().DurationVar(&maxAge, "max-age", 30*time.Second, "with --ready, the oldest heartbeat still taken as alive")
	return cmd
}

func printStatus(w io.Writer, rep statusReport, now time.Time) {
	if rep.Agent == nil {
		fmt.Fprintf(w, "Agent:     not running or never started (%s)\n", rep.AgentErr)
	} else {
		a := rep.Agent
		state := "ready"
		if !a.Ready {
			state = "NOT READY"
		}
		if a.Reason != "" {
			state += " (" + a.Reason + ")"
		}
		if a.Process == status.ProcessGone {
			// What follows is the dead agent's last word, not the node now.
			fmt.Fprintf(w, "Agent:     agent process not running (pid %d); its last heartbeat, %s ago, said: %s, version %s\n",
				a.PID, now.Sub(a.Heartbeat).Round(time.Millisecond), state, a.Version)
		} else {
			fmt.Fprintf(w, "Agent:     %s, pid %d, version %s, heartbeat %s ago\n", state, a.PID, a.Version, now.Sub(a.Heartbeat).Round(time.Millisecond))
		}
		if d := a.Degraded; d != nil {
			fmt.Fprintf(w, "DEGRADED:  cloud unreachable since %s (%s ago), serving %d idle addresses; growth and release wait (%s)\n",
				d.Since.UTC().Format(time.RFC3339), now.Sub(d.Since).Round(time.Second), d.Idle, d.Reason)
		}
		p := a.Pool
		fmt.Fprintf(w, "Pool:      %d IPs on %d ENIs: %d used, %d idle, %d cooldown, %d sticky\n", p.Total, p.ENIs, p.Used, p.Idle, p.Cooldown, p.Sticky)
		for _, s := range a.Sets {
			name := s.Name
			if name == "" {
				name = "(annotation)"
			}
			fmt.Fprintf(w, "  Set %s [%s]: %d pods (%d waiting) on ENIs %s; %d IPs: %d used, %d idle, %d cooldown, %d sticky\n",
				name, strings.Join(s.SecurityGroups, ","), s.Pods, s.Waiting, orDash(strings.Join(s.ENIs, " ")), s.Total, s.Used, s.Idle, s.Cooldown, s.Sticky)
		}
		if p.Capacity > 0 {
			fmt.Fprintf(w, "Capacity:  %d pod addresses (enid.dev/pod-ips); kubelet maxPods: at most %d + the node's host-network pods\n", p.Capacity, p.Capacity)
		}
		if a.Kube != "" {
			fmt.Fprintf(w, "Kube API:  %s\n", a.Kube)
		}
		printHints(w, a.Hints)
		// Counted from the status files listed below, not the heartbeat's
		// count: the agent writes that at the end of the pass after a
		// publication, so a status an ADD just returned with may not be in
		// it yet, and the line would disagree with the table.
		byPhase := map[status.Phase]int{}
		for _, p := range rep.Pods {
			byPhase[p.Phase]++
		}
		var phases []string
		for ph, n := range byPhase {
			phases = append(phases, fmt.Sprintf("%d %s", n, ph))
		}
		sort.Strings(phases)
		fmt.Fprintf(w, "Pods:      %s\n", orDash(strings.Join(phases, ", ")))
		if pending, failed := staleEntries(rep.Pods); pending+failed > 0 {
			fmt.Fprintf(w, "Stale:     %d entries whose pod network namespace is gone (netns-gone): %d waiting for their CNI DEL, %d given up; they hold no address\n",
				pending+failed, pending, failed)
		}
		if len(a.LastErrors) > 0 {
			fmt.Fprintln(w, "Last errors:")
			for _, e := range a.LastErrors {
				fmt.Fprintln(w, "  -", e)
			}
		}
	}
	if len(rep.Pods) == 0 {
		fmt.Fprintln(w, "\nNo pod attachments.")
	} else {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTACHMENT\tPHASE\tADDRESSES\tENI\tREASON")
		for _, p := range rep.Pods {
			var addrs []string
			for _, ip := range p.IPs {
				addrs = append(addrs, ip.Address.String())
			}
			id := p.ContainerID
			if len(id) > 12 {
				id = id[:12]
			}
			fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\n", id, p.IfName, p.Phase, orDash(strings.Join(addrs, ",")), orDash(p.ENIID), orDash(p.Reason))
		}
		tw.Flush()
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
}

// printHints prints what the agent made of the kubelet's and the
// runtime's files (nothing for an agent that reads none, or older than
// the heartbeat's hints).
func printHints(w io.Writer, h *status.Hints) {
	if h == nil {
		return
	}
	fmt.Fprintf(w, "Hints:     %d pods listed by the kubelet, %d expected (admitted, no entry yet)\n", h.Admitted, h.Expected)
	if h.NotFound != "" {
		fmt.Fprintf(w, "  NOT FOUND: %s\n", h.NotFound)
	}
	for _, p := range h.Problems {
		fmt.Fprintf(w, "  PROBLEM (%s): %s: %s\n", p.Source, p.Path, p.Error)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// staleEntries counts the attachments whose pod network namespace is gone
// (reason netns-gone), Pending and Failed.
func staleEntries(pods []status.Attachment) (pending, failed int) {
	for _, p := range pods {
		if p.ReasonCode != string(planner.ReasonNetNSGone) {
			continue
		}
		if p.Phase == status.Failed {
			failed++
		} else {
			pending++
		}
	}
	return pending, failed
}
