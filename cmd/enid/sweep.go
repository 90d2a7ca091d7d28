package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/enidnet/enid/cloud"
	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/sweep"
)

// sweepFlags are `enid sweep`'s own flags; the config and cloud flags are
// nodeFlags' (the sweep reads the cloud section of the agent's config).
type sweepFlags struct {
	dryRun        bool
	grace         time.Duration
	stoppedOwners bool
	vpcID         string
	output        string
	showKept      bool
	detailed      bool
}

func newSweepCmd() *cobra.Command {
	var (
		f  nodeFlags
		sf sweepFlags
	)
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Delete the ENIs that dead nodes left behind (cluster-wide; run it as a CronJob)",
		Long: `Find the ENIs that carry enid's tags (enid.dev/managed-by=enid and
enid.dev/owner=<instance>) in the region, and delete those that no node
will ever clean up: Available, older than --grace, whose owner instance
no longer exists (released), or, with --stopped-owners, is Stopped.

A node's agent deletes what it leaks while it lives. A node that dies in
the middle of a create, or after a detach and before the delete, leaves an
Available ENI and its addresses that no agent sees again; ENIs enid
creates are released with their instance (DeleteOnRelease), so an ENI
attached when its node is released goes with it.

Never touched: an ENI without both tags, a primary ENI, one that is not
Available, one whose owner exists (a Stopped owner's only with
--stopped-owners), one younger than --grace, and everything when any read
failed (the sweep is then incomplete and deletes nothing).

It reads the cloud section of the agent's config (region, endpoint,
credentials, rate limit) from --config-file and --config-dir, and the
same environment as "enid run" (ENID_ECS_ENDPOINT, ALIBABA_CLOUD_*).
It needs ecs:DescribeNetworkInterfaces, ecs:DescribeInstances and
ecs:DeleteNetworkInterface (docs/deploy.md has a RAM policy), and nothing
of the Kubernetes API.

--dry-run prints what it would delete, like "enid plan". Exit codes: 0
done (or nothing to do), 1 an error or a deletion that failed; with
--detailed-exitcode, 2 when there were ENIs to delete (deleted, or with
--dry-run to be deleted).`,
		Example: `  enid sweep --dry-run --show-kept
  enid sweep --grace 30m --output json
  enid sweep --stopped-owners --vpc-id vpc-abc`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sf.output != "text" && sf.output != "json" {
				return fmt.Errorf("--output %q: use text or json", sf.output)
			}
			if sf.grace < 0 {
				return fmt.Errorf("--grace %s: must not be negative", sf.grace)
			}
			return runSweep(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f, sf)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.configFile, "config-file", "/etc/enid/config.yaml", "the agent's config: its cloud section says how to reach the API")
	fs.StringVar(&f.configDir, "config-dir", "/etc/enid/config.d", "drop-in directory (*.yaml merged in lexical order)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	fs.BoolVar(&sf.dryRun, "dry-run", false, "print what would be deleted and delete nothing")
	fs.DurationVar(&sf.grace, "grace", sweep.DefaultGrace, "how old an ENI must be before it is deleted (from its creation time)")
	fs.BoolVar(&sf.stoppedOwners, "stopped-owners", false, "give up the ENIs of Stopped owners too (for fleets that never start a stopped node again)")
	fs.StringVar(&sf.vpcID, "vpc-id", "", "only sweep ENIs of this VPC (default: every VPC of the region)")
	fs.StringVarP(&sf.output, "output", "o", "text", "output format: text or json")
	fs.BoolVar(&sf.showKept, "show-kept", false, "list every kept ENI with its reason, not only their counts")
	fs.BoolVar(&sf.detailed, "detailed-exitcode", false, "exit 2 when there were ENIs to delete, 0 when none, 1 on error")
	return cmd
}

// sweepCloud is what the sweep needs of the cloud client.
type sweepCloud interface {
	ListENIs(ctx context.Context, f cloud.ENIFilter) ([]observed.ENI, error)
	InstanceStatuses(ctx context.Context, ids []string) (map[string]string, error)
	DeleteENI(ctx context.Context, eniID string) error
}

func runSweep(ctx context.Context, stdout, stderr io.Writer, f *nodeFlags, sf sweepFlags) error {
	log, err := f.logger(os.Stderr)
	if err != nil {
		return err
	}
	cfg, err := baseConfig(f)
	if err != nil {
		printLines(stderr, fmt.Sprintf("invalid config (%s):", f.configFile), configErrorLines(err))
		return &exitError{code: 1, err: fmt.Errorf("invalid config")}
	}
	clk := clock.Real{} // the grace period is measured against the ENIs' real creation times
	cs, err := newCloudClient(ctx, f, cfg, log, nil, clk)
	if err != nil {
		return &exitError{code: 1, err: err}
	}
	defer cs.client.CloseIdleConnections()
	p := planSweep(ctx, cs.client, sf, clk.Now())
	var results []sweep.Result
	if !sf.dryRun && p.Complete {
		results = executeSweep(ctx, cs.client, p, log)
	}
	if err := printSweep(stdout, p, results, sf); err != nil {
		return &exitError{code: 1, err: err}
	}
	switch {
	case !p.Complete:
		return &exitError{code: 1, err: fmt.Errorf("sweep incomplete: nothing deleted")}
	case failed(results) > 0:
		return &exitError{code: 1, err: fmt.Errorf("%d of %d deletions failed", failed(results), len(results))}
	case sf.detailed && len(p.Delete) > 0:
		return &exitError{code: 2}
	}
	return nil
}

// planSweep observes the account and decides. A failed read makes the
// plan incomplete (it then deletes nothing).
func planSweep(ctx context.Context, c sweepCloud, sf sweepFlags, now time.Time) sweep.Plan {
	in := sweep.Input{Complete: true}
	enis, err := c.ListENIs(ctx, cloud.ENIFilter{Tags: map[string]string{observed.TagManagedBy: observed.TagManagedByValue}})
	if err != nil {
		in.Complete = false
		in.Problems = append(in.Problems, fmt.Sprintf("list enid's ENIs: %v", err))
	}
	in.ENIs = enis
	if owners := sweep.OwnersToLookUp(enis); len(owners) > 0 && err == nil {
		in.Owners, err = c.InstanceStatuses(ctx, owners)
		if err != nil {
			in.Complete = false
			in.Problems = append(in.Problems, fmt.Sprintf("describe the owners: %v", err))
		}
	}
	return sweep.Decide(in, sweep.Options{Now: now, Grace: sf.grace, StoppedOwners: sf.stoppedOwners, VPCID: sf.vpcID})
}

// executeSweep deletes what the plan says, one ENI after the other at the
// client's rate, and reports each. An ENI already gone counts as deleted.
func executeSweep(ctx context.Context, c sweepCloud, p sweep.Plan, log *slog.Logger) []sweep.Result {
	results := make([]sweep.Result, 0, len(p.Delete))
	for _, it := range p.Delete {
		r := sweep.Result{ENIID: it.ENIID}
		if err := c.DeleteENI(ctx, it.ENIID); err != nil {
			r.Err = err.Error()
			log.Warn("sweep: delete eni", "eni", it.ENIID, "owner", it.Owner, "err", err)
		} else {
			log.Info("sweep: deleted eni", "eni", it.ENIID, "owner", it.Owner, "reason", it.Code)
		}
		results = append(results, r)
	}
	return results
}

func printSweep(w io.Writer, p sweep.Plan, results []sweep.Result, sf sweepFlags) error {
	if sf.output == "json" {
		b, err := p.JSON(results)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := io.WriteString(w, p.Render(sf.showKept, results))
	return err
}

func failed(rs []sweep.Result) int {
	n := 0
	for _, r := range rs {
		if r.Err != "" {
			n++
		}
	}
	return n
}
