package sweep_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/enidnet/enid/observed"
	"github.com/enidnet/enid/sweep"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/")

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// eni is an ENI enid created for owner, Available, created ago.
func eni(id, owner string, ago time.Duration) observed.ENI {
	return observed.ENI{ID: id, Status: observed.ENIAvailable, Type: observed.ENITypeSecondary, VSwitchID: "vsw-a", VPCID: "vpc-1",
		CreatedAt: now.Add(-ago), Tags: map[string]string{observed.TagManagedBy: observed.TagManagedByValue, observed.TagOwner: owner}}
}

func with(e observed.ENI, f func(*observed.ENI)) observed.ENI {
	f(&e)
	return e
}

// TestDecide: an ENI is deleted only when it is enid's, Available, older
// than the grace period and its owner is gone (or stopped, when asked);
// every other ENI is kept, with the reason.
func TestDecide(t *testing.T) {
	owners := map[string]string{"i-run": "Running", "i-stop": "Stopped", "i-starting": "Starting"}
	for _, tt := range []struct {
		name    string
		eni     observed.ENI
		opts    sweep.Options
		partial bool
		want    sweep.Code
		deleted bool
	}{
		{name: "owner gone", eni: eni("eni-1", "i-dead", time.Hour), want: sweep.OwnerGone, deleted: true},
		{name: "owner running", eni: eni("eni-1", "i-run", time.Hour), want: sweep.OwnerAlive},
		{name: "owner starting", eni: eni("eni-1", "i-starting", time.Hour), want: sweep.OwnerAlive},
		{name: "owner stopped, kept by default", eni: eni("eni-1", "i-stop", time.Hour), want: sweep.OwnerAlive},
		{name: "owner stopped, given up", eni: eni("eni-1", "i-stop", time.Hour), opts: sweep.Options{StoppedOwners: true}, want: sweep.OwnerStopped, deleted: true},
		{name: "running owner with stopped-owners", eni: eni("eni-1", "i-run", time.Hour), opts: sweep.Options{StoppedOwners: true}, want: sweep.OwnerAlive},
		{name: "in grace", eni: eni("eni-1", "i-dead", 9*time.Minute), want: sweep.InGrace},
		{name: "past a shorter grace", eni: eni("eni-1", "i-dead", 9*time.Minute), opts: sweep.Options{Grace: time.Minute}, want: sweep.OwnerGone, deleted: true},
		{name: "tag younger than CreationTime", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) {
			e.Tags[observed.TagCreatedAt] = now.Add(-time.Minute).Format(time.RFC3339)
		}), want: sweep.InGrace},
		{name: "age unknown", eni: with(eni("eni-1", "i-dead", 0), func(e *observed.ENI) { e.CreatedAt = time.Time{} }), want: sweep.AgeUnknown},
		{name: "created in the future", eni: eni("eni-1", "i-dead", -time.Hour), want: sweep.AgeUnknown},
		{name: "attached", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) { e.Status = observed.ENIInUse }), want: sweep.NotAvailable},
		{name: "detaching", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) { e.Status = observed.ENIDetaching }), want: sweep.NotAvailable},
		{name: "deleting", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) { e.Status = observed.ENIDeleting }), want: sweep.NotAvailable},
		{name: "no owner tag", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) { delete(e.Tags, observed.TagOwner) }), want: sweep.NotEnids},
		{name: "owner tag without managed-by", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) { delete(e.Tags, observed.TagManagedBy) }), want: sweep.NotEnids},
		{name: "managed by someone else", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) { e.Tags[observed.TagManagedBy] = "terway" }), want: sweep.NotEnids},
		{name: "primary", eni: with(eni("eni-1", "i-dead", time.Hour), func(e *observed.ENI) { e.Type = observed.ENITypePrimary }), want: sweep.NotEnids},
		{name: "other VPC", eni: eni("eni-1", "i-dead", time.Hour), opts: sweep.Options{VPCID: "vpc-2"}, want: sweep.OtherVPC},
		{name: "partial observation", eni: eni("eni-1", "i-dead", time.Hour), partial: true, want: sweep.Incomplete},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Now = now
			p := sweep.Decide(sweep.Input{ENIs: []observed.ENI{tt.eni}, Owners: owners, Complete: !tt.partial}, tt.opts)
			var got sweep.Item
			switch {
			case len(p.Delete) == 1 && len(p.Keep) == 0:
				got = p.Delete[0]
			case len(p.Keep) == 1 && len(p.Delete) == 0:
				got = p.Keep[0]
			default:
				t.Fatalf("plan %+v", p)
			}
			if got.Code != tt.want || (len(p.Delete) == 1) != tt.deleted {
				t.Errorf("code %s (deleted %v), want %s (deleted %v): %s", got.Code, len(p.Delete) == 1, tt.want, tt.deleted, got.Text)
			}
		})
	}
}

// TestRender: the plan and its results as text and JSON (golden files;
// go test ./sweep/ -rewrite updates them).
func TestRender(t *testing.T) {
	in := sweep.Input{Complete: true, Owners: map[string]string{"i-run": "Running", "i-stop": "Stopped"}, ENIs: []observed.ENI{
		eni("eni-b", "i-dead1", 2*time.Hour),
		eni("eni-a", "i-dead2", 30*time.Minute),
		eni("eni-c", "i-run", time.Hour),
		eni("eni-d", "i-stop", time.Hour),
		eni("eni-e", "i-dead1", 2*time.Minute),
		with(eni("eni-f", "i-dead1", time.Hour), func(e *observed.ENI) { e.Status = observed.ENIInUse }),
	}}
	p := sweep.Decide(in, sweep.Options{Now: now})
	results := []sweep.Result{{ENIID: "eni-a"}, {ENIID: "eni-b", Err: "delete eni eni-b: throttled"}}
	js, err := p.JSON(results)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	golden(t, "dry-run.txt", p.Render(false, nil))
	golden(t, "dry-run-kept.txt", p.Render(true, nil))
	golden(t, "executed.txt", p.Render(false, results))
	golden(t, "executed.json", string(js)+"\n")
	golden(t, "incomplete.txt", sweep.Decide(sweep.Input{ENIs: in.ENIs[:1], Problems: []string{"describe instances: throttled"}}, sweep.Options{Now: now}).Render(true, nil))
	golden(t, "empty.txt", sweep.Decide(sweep.Input{Complete: true}, sweep.Options{Now: now, StoppedOwners: true}).Render(false, nil))
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *rewrite {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}
