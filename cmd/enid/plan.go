package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/enidnet/enid/internal/clock"
	"github.com/enidnet/enid/planner"
	"github.com/enidnet/enid/reconcile"
)

func newPlanCmd() *cobra.Command {
	var (
		f         nodeFlags
		candidate string
		output    string
		detailed  bool
	)
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what the agent would do now (read-only), optionally under a candidate config",
		Long: `Observe the cloud and the node (read-only), read the pod entries, and print the
plan the agent would execute, like "terraform plan".

--config previews a candidate config before it is merged (a GitOps pull
request check): the candidate replaces the main config file; drop-ins from
--config-dir are still merged over it (point --config-dir at the candidate's
drop-in directory, or at an empty one). An invalid candidate prints every
problem and exits 1.

Exit codes with --detailed-exitcode: 0 no changes, 2 changes, 1 error.
Without it: 0 unless there is an error.`,
		Example: `  enid plan
  enid plan --output json | jq '{cloudCalls, nodeChanges, pool}'
  enid plan --config ./candidate/config.yaml --config-dir ./candidate/config.d --detailed-exitcode`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: use text or json", output)
			}
			if candidate != "" {
				if _, err := os.Stat(candidate); err != nil {
					return &exitError{code: 1, err: fmt.Errorf("--config: %w", err)}
				}
				f.configFile = candidate
			}
			p, err := makePlan(cmd, &f)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			if err := printPlan(cmd.OutOrStdout(), p, output); err != nil {
				return &exitError{code: 1, err: err}
			}
			if detailed && !p.Empty() {
				return &exitError{code: 2}
			}
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&candidate, "config", "", "candidate config file to preview instead of --config-file")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json (schema: docs/plan.schema.json)")
	cmd.Flags().BoolVar(&detailed, "detailed-exitcode", false, "exit 0 when there are no changes, 2 when there are, 1 on error")
	return cmd
}

// makePlan observes read-only and plans, as the agent's next pass would
// (reconcile.PlanOnce: the same completion of desired state, guards and
// memory as the agent's pass). There is no Kubernetes link here: pod facts
// the API server would add to entries are not applied.
func makePlan(cmd *cobra.Command, f *nodeFlags) (planner.Plan, error) {
	ctx := cmd.Context()
	log, err := f.logger(os.Stderr)
	if err != nil {
		return planner.Plan{}, err
	}
	base, err := baseConfig(f)
	if err != nil {
		printLines(cmd.ErrOrStderr(), fmt.Sprintf("invalid config (%s):", f.configFile), configErrorLines(err))
		return planner.Plan{}, reconcile.ErrConfigInvalid
	}
	clk := clock.Real{} // `enid plan` plans at the present, as the agent would
	cs, err := newCloud(ctx, f, base, log, nil, clk)
	if err != nil {
		return planner.Plan{}, err
	}
	dp, closeDP, err := newDatapath(f, log)
	if err != nil {
		return planner.Plan{}, err
	}
	defer closeDP()
	r, err := reconcile.PlanOnce(ctx, reconcile.Config{Paths: f.paths(), InstanceID: cs.instanceID,
		NodeName: f.resolveNodeName(), NodeLabels: f.labels, Cloud: cs.client, Datapath: dp, Logger: log, Clock: clk}, nil)
	if errors.Is(err, reconcile.ErrConfigInvalid) {
		printLines(cmd.ErrOrStderr(), fmt.Sprintf("invalid config (%s):", f.configFile), r.Desired.ConfigProblems)
	}
	return r.Plan, err
}

func printPlan(w io.Writer, p planner.Plan, output string) error {
	if output == "json" {
		b, err := p.JSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := io.WriteString(w, p.Render())
	return err
}

func printLines(w io.Writer, head string, lines []string) {
	fmt.Fprintln(w, head)
	for _, l := range lines {
		fmt.Fprintln(w, "  -", l)
	}
}
