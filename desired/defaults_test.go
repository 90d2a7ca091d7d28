package desired

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDefaultsDocumented keeps the defaults table in docs/config.md equal to
// DefaultConfig.
func TestDefaultsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## Defaults")
	section, _, _ = strings.Cut(section, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| `([^`]+)`")
	got := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		got[m[1]] = m[2]
	}
	d := DefaultConfig()
	want := map[string]string{
		"mode":                     string(d.Mode),
		"ipStack":                  string(d.IPStack),
		"pool.minIdle":             itoa(d.Pool.MinIdle),
		"pool.maxIdle":             itoa(d.Pool.MaxIdle),
		"pool.minTotal":            itoa(d.Pool.MinTotal),
		"pool.batch":               itoa(d.Pool.Batch),
		"pool.releaseDelay":        short(d.Pool.ReleaseDelay),
		"pool.cooldown":            short(d.Pool.Cooldown),
		"pool.spreadWindow":        short(d.Pool.SpreadWindow),
		"eni.maxENIs":              itoa(d.ENI.MaxENIs),
		"eni.vSwitchPolicy":        string(d.ENI.VSwitchPolicy),
		"eni.mtu":                  itoa(d.ENI.MTU),
		"eni.ipv4Allocation":       string(d.ENI.IPv4Allocation),
		"cloud.rateLimit.qps":      strconv.FormatFloat(d.Cloud.RateLimit.QPS, 'f', -1, 64),
		"cloud.rateLimit.burst":    itoa(d.Cloud.RateLimit.Burst),
		"cloud.credentials.source": string(d.Cloud.Credentials.Source),
		"stickyIPHold":             short(d.StickyIPHold),
		"resyncPeriod":             short(d.ResyncPeriod),
		"staleEntryTimeout":        short(d.StaleEntryTimeout),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/config.md defaults table vs DefaultConfig (-code +doc):\n%s", diff)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// short writes a duration as people do: "5m", not "5m0s".
func short(d Duration) string {
	s := d.D().String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// TestIPv4AllocationExampleLoads parses the example of docs/config.md's
// "IPv4 prefixes" section, so the documented config stays one that loads.
func TestIPv4AllocationExampleLoads(t *testing.T) {
	doc, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## IPv4 prefixes")
	if !ok {
		t.Fatal(`docs/config.md has no "## IPv4 prefixes" section`)
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("no yaml example in the IPv4 prefixes section")
	}
	c, err := ParseConfig([]byte(block), NodeFacts{Zone: "cn-hangzhou-k"})
	if err != nil {
		t.Fatalf("the documented example does not load: %v\n%s", err, block)
	}
	if c.ENI.IPv4Allocation != IPv4PreferPrefix {
		t.Errorf("eni.ipv4Allocation = %q, want %q", c.ENI.IPv4Allocation, IPv4PreferPrefix)
	}
}
