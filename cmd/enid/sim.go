package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/enidnet/enid/cloud/ecssim"
)

// simFlags are the flags of "enid sim".
type simFlags struct {
	region, instanceType, zone       string
	zones, vswitches, faults         []string
	ecsAddr, metadataAddr, stateFile string
	accessKeyID, accessKeySecret     string
	attach, detach, del, mdLag       time.Duration
	latency, staleReads              time.Duration
	faultRate, rateQPS               float64
	rateBurst                        int
	verbose                          bool
	profile                          string
	// set reports whether a flag was given (nil: none was); a given flag
	// overrides the profile.
	set func(name string) bool
}

func newSimCmd() *cobra.Command {
	var f simFlags
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the ECS/VPC/metadata simulator with one instance",
		Long: `sim runs the local ECS/VPC OpenAPI and instance metadata simulator with one
instance, its primary ENI and the vSwitches ready, prints shell export lines
(ENID_ECS_ENDPOINT, ENID_METADATA_ENDPOINT, ALIBABA_CLOUD_ACCESS_KEY_ID,
ALIBABA_CLOUD_ACCESS_KEY_SECRET, ALIBABA_CLOUD_REGION_ID) and serves until
SIGINT or SIGTERM. Use it as: eval "$(enid sim &)" or read its first lines.

The control API lives on the ECS endpoint under /_sim/ (counters, state,
faults, settings).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			f.set = cmd.Flags().Changed
			return runSim(ctx, cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.region, "region", ecssim.DefaultRegion, "region ID")
	fl.StringVar(&f.instanceType, "instance-type", ecssim.DefaultInstanceType, "instance type of the simulated instance")
	fl.StringVar(&f.zone, "zone", "", "zone of the instance (default: the first zone)")
	fl.StringSliceVar(&f.zones, "zones", nil, "zone IDs (default <region>-h,<region>-i)")
	fl.StringArrayVar(&f.vswitches, "vswitch", nil, "vSwitch as ID,ZONE,CIDR[,IPV6CIDR] (repeatable; default one /24 per zone)")
	fl.StringVar(&f.ecsAddr, "listen", "127.0.0.1:0", "ECS/VPC API listen address")
	fl.StringVar(&f.metadataAddr, "metadata-listen", "127.0.0.1:0", "metadata service listen address")
	fl.StringVar(&f.stateFile, "state-file", "", "load the model from and save it to this file")
	fl.StringVar(&f.accessKeyID, "access-key-id", ecssim.DefaultAccessKeyID, "accepted access key ID")
	fl.StringVar(&f.accessKeySecret, "access-key-secret", ecssim.DefaultAccessKeySecret, "its secret")
	fl.DurationVar(&f.attach, "attach-delay", ecssim.DefaultAttachDelay, "Attaching -> InUse delay")
	fl.DurationVar(&f.detach, "detach-delay", ecssim.DefaultDetachDelay, "Detaching -> Available delay")
	fl.DurationVar(&f.del, "delete-delay", ecssim.DefaultDeleteDelay, "Deleting -> gone delay")
	fl.DurationVar(&f.mdLag, "metadata-lag", 0, "how long a new ENI's MAC stays out of the metadata service")
	fl.DurationVar(&f.latency, "latency", 0, "mean exponential latency added to every API call")
	fl.DurationVar(&f.staleReads, "stale-reads", 0, "how long reads show an ENI as it was before a change")
	fl.Float64Var(&f.faultRate, "fault-rate", 0, "probability (0..1) that any call fails with Throttling, InternalError or ServiceUnavailable")
	fl.StringArrayVar(&f.faults, "fault", nil, "fault ACTION=CODE[xCOUNT] (the next COUNT calls fail with CODE) or ACTION=RATE (random errors); ACTION * means every action (repeatable)")
	fl.Float64Var(&f.rateQPS, "rate-limit-qps", 0, "account-wide API rate limit answering Throttling.User (0: none)")
	fl.IntVar(&f.rateBurst, "rate-limit-burst", 0, "burst of the account-wide rate limit")
	fl.BoolVar(&f.verbose, "verbose", false, "log every call to stderr")
	fl.StringVar(&f.profile, "profile", ecssim.ProfileFast, "timing and faults: fast (50ms attaches, no lag) or realistic (seconds-long attaches, stale reads, metadata lag, latency, occasional OperationConflict); the delay, lag, latency, stale-reads and fault-rate flags given override it")
	return cmd
}

func simConfig(f simFlags, log *slog.Logger) (ecssim.Config, error) {
	cfg := ecssim.Config{
		Region: f.region, Zones: f.zones, StateFile: f.stateFile, Logger: log,
		AccessKeys:       map[string]string{f.accessKeyID: f.accessKeySecret},
		Delays:           ecssim.Delays{Attach: nz(f.attach), Detach: nz(f.detach), Delete: nz(f.del)},
		MetadataLag:      f.mdLag,
		Latency:          ecssim.Latency{Exponential: f.latency},
		Faults:           ecssim.Faults{Rate: f.faultRate},
		AccountRateLimit: ecssim.RateLimit{QPS: f.rateQPS, Burst: f.rateBurst},
		StaleReads:       f.staleReads,
	}
	if f.profile != "" && f.profile != ecssim.ProfileFast {
		if err := ecssim.ApplyProfile(&cfg, f.profile); err != nil {
			return cfg, err
		}
		set := f.set
		if set == nil {
			set = func(string) bool { return false }
		}
		if set("attach-delay") {
			cfg.Delays.Attach = nz(f.attach)
		}
		if set("detach-delay") {
			cfg.Delays.Detach = nz(f.detach)
		}
		if set("delete-delay") {
			cfg.Delays.Delete = nz(f.del)
		}
		if set("metadata-lag") {
			cfg.MetadataLag = f.mdLag
		}
		if set("latency") {
			cfg.Latency = ecssim.Latency{Exponential: f.latency}
		}
		if set("stale-reads") {
			cfg.StaleReads = f.staleReads
		}
		if set("fault-rate") {
			cfg.Faults.Rate = f.faultRate
		}
	}
	for _, v := range f.vswitches {
		parts := strings.Split(v, ",")
		if len(parts) < 3 || len(parts) > 4 {
			return cfg, fmt.Errorf("--vswitch %q: want ID,ZONE,CIDR[,IPV6CIDR]", v)
		}
		vc := ecssim.VSwitchConfig{ID: parts[0], Zone: parts[1]}
		var err error
		if vc.CIDR, err = netip.ParsePrefix(parts[2]); err != nil {
			return cfg, fmt.Errorf("--vswitch %q: %w", v, err)
		}
		if len(parts) == 4 {
			if vc.IPv6CIDR, err = netip.ParsePrefix(parts[3]); err != nil {
				return cfg, fmt.Errorf("--vswitch %q: %w", v, err)
			}
		}
		cfg.VSwitches = append(cfg.VSwitches, vc)
		if len(f.zones) == 0 && !contains(cfg.Zones, vc.Zone) {
			cfg.Zones = append(cfg.Zones, vc.Zone)
		}
	}
	return cfg, nil
}

// nz maps a zero duration to the smallest one: ecssim reads zero as
// "default", the flag means "no delay".
func nz(d time.Duration) time.Duration {
	if d == 0 {
		return ecssim.NoDelay
	}
	return d
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func parseFault(s string) (ecssim.Fault, error) {
	action, rest, ok := strings.Cut(s, "=")
	if !ok || action == "" || rest == "" {
		return ecssim.Fault{}, fmt.Errorf("--fault %q: want ACTION=CODE[xCOUNT]", s)
	}
	if action == "*" {
		action = ""
	}
	if rate, err := strconv.ParseFloat(rest, 64); err == nil {
		if rate <= 0 || rate > 1 {
			return ecssim.Fault{}, fmt.Errorf("--fault %q: rate must be in (0, 1]", s)
		}
		return ecssim.Fault{Action: action, Rate: rate}, nil
	}
	f := ecssim.Fault{Action: action, Code: rest, Count: 1}
	// A trailing xN is a count; codes may contain x themselves ("Exceeded").
	if i := strings.LastIndex(rest, "x"); i > 0 {
		if n, err := strconv.Atoi(rest[i+1:]); err == nil {
			if n < 1 {
				return ecssim.Fault{}, fmt.Errorf("--fault %q: count must be at least 1", s)
			}
			f.Code, f.Count = rest[:i], n
		}
	}
	return f, nil
}

func runSim(ctx context.Context, cmd *cobra.Command, f simFlags) error {
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	cfg, err := simConfig(f, log)
	if err != nil {
		return err
	}
	sim, err := ecssim.New(cfg)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	for _, s := range f.faults {
		fault, err := parseFault(s)
		if err != nil {
			return err
		}
		sim.InjectFault(fault)
	}
	var inst string
	if st := sim.Dump(); len(st.Instances) > 0 { // loaded from --state-file
		inst = st.Instances[0].ID
	} else {
		info, err := sim.AddInstance(ecssim.InstanceSpec{InstanceType: f.instanceType, Zone: f.zone})
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		inst = info.ID
	}
	if err := sim.Start(f.ecsAddr, f.metadataAddr); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "export ENID_ECS_ENDPOINT='%s'\n", sim.Endpoint())
	fmt.Fprintf(out, "export ENID_METADATA_ENDPOINT='%s'\n", sim.MetadataURL(inst))
	fmt.Fprintf(out, "export ALIBABA_CLOUD_ACCESS_KEY_ID='%s'\n", f.accessKeyID)
	fmt.Fprintf(out, "export ALIBABA_CLOUD_ACCESS_KEY_SECRET='%s'\n", f.accessKeySecret)
	fmt.Fprintf(out, "export ALIBABA_CLOUD_REGION_ID='%s'\n", sim.Dump().Region)
	fmt.Fprintf(out, "# instance %s; control API http://%s/_sim/; stop with SIGINT or SIGTERM\n", inst, sim.Endpoint())
	<-ctx.Done()
	log.Info("sim: stopping")
	return sim.Close()
}
