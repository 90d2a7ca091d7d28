package desired

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// The fixtures under testdata/hints are in the formats kubelet and libcni
// write: allocated_pods_state (a JSON string inside a checksummed envelope),
// the device manager's kubelet_internal_checkpoint, and libcni's
// cniCacheV1 records named <network>-<containerID>-<ifName>. Of those, only
// enid's network counts: enid-149647f1...-eth0 and cni-loopback-149647f1...-lo
// are the pair containerd 1.6.20 wrote for one sandbox of TestCRIPodLifecycle
// (the config re-encoded as the shipped conflist, which containerd reads from
// its conf dir), and containerd's loopback record beside every sandbox, like
// a record of another network (podnet-..., a bridge list), is no attachment
// of enid's.
func TestReadHintsFromFixtures(t *testing.T) {
	got := ReadHints(HintSources{
		AllocatedPodsState: "testdata/hints/allocated_pods_state",
		DeviceCheckpoint:   "testdata/hints/kubelet_internal_checkpoint",
		CNIResultsDir:      "testdata/hints/cni/results",
	})
	want := Hints{
		AdmittedPodUIDs: []string{
			"0f2e4d6c-8a1b-4c3d-9e5f-7a6b5c4d3e2f", // in both files
			"7c3f9a2e-1b4d-4e8f-9a6b-2d5c8e1f0a3b",
			"e1d2c3b4-a596-4877-8695-a4b3c2d1e0f9", // device checkpoint only
		},
		RuntimeAttachments: []RuntimeAttachment{
			{Network: "enid", ContainerID: "149647f1bdc40f502a1cb7a91bedb1b4acc6a2d8d41743af8ecb4e08b36551ad", IfName: "eth0", IPs: []netip.Prefix{netip.MustParsePrefix("192.168.0.8/32")}},
			{Network: "enid", ContainerID: "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b", IfName: "eth0", IPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.18/32")}},
			{Network: "enid", ContainerID: "9b1e8c7d6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c", IfName: "eth0", IPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.17/32")}},
		},
		Problems: []HintProblem{{Source: SourceCNIResults, Path: "testdata/hints/cni/results/enid-broken-eth0", Err: `unknown cache kind "cniCacheV2" (want cniCacheV1)`}},
	}
	// The fixtures' times are the checkout's: only that there is one.
	if got.AdmittedAt.IsZero() {
		t.Error("AdmittedAt is zero: want the files' modification time")
	}
	got.AdmittedAt = time.Time{}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// A HintReader's second read, from its cache of parsed records, skips
// the records of other networks as the first did.
func TestHintReaderCacheKeepsOnlyEnidRecords(t *testing.T) {
	src := HintSources{CNIResultsDir: "testdata/hints/cni/results"}
	var r HintReader
	first := r.Read(src)
	if len(r.cni) == 0 {
		t.Fatal("the reader cached no record")
	}
	second := r.Read(src)
	if d := cmp.Diff(first, second, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
		t.Errorf("second read (-first +second):\n%s", d)
	}
	for _, a := range second.RuntimeAttachments {
		if a.Network != "enid" {
			t.Errorf("record of network %s among the runtime's attachments: %+v", a.Network, a)
		}
	}
}

func TestReadHintsToleratesMissingAndUnknown(t *testing.T) {
	dir := t.TempDir()
	missing := ReadHints(HintSources{
		AllocatedPodsState: filepath.Join(dir, "absent"),
		DeviceCheckpoint:   filepath.Join(dir, "absent2"),
		CNIResultsDir:      filepath.Join(dir, "absent-dir"),
	})
	if diff := cmp.Diff(Hints{Absent: []string{filepath.Join(dir, "absent"), filepath.Join(dir, "absent2")}}, missing); diff != "" {
		t.Errorf("missing files (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Hints{}, ReadHints(HintSources{})); diff != "" {
		t.Errorf("no sources (-want +got):\n%s", diff)
	}

	alloc := filepath.Join(dir, "allocated_pods_state")
	writeFile(t, alloc, `{"data":"{\"podResources\":{}}","checksum":1}`)
	dev := filepath.Join(dir, "kubelet_internal_checkpoint")
	writeFile(t, dev, `{"Version":"v3","Entries":[]}`)
	got := ReadHints(HintSources{AllocatedPodsState: alloc, DeviceCheckpoint: dev})
	want := Hints{AdmittedPartial: true, Problems: []HintProblem{
		{SourceAllocatedPods, alloc, `unknown format: data has no "entries" map`},
		{SourceDeviceCheckpoint, dev, `unknown format: want {"Data": {"PodDeviceEntries": [...]}, "Checksum": N}`},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unknown versions (-want +got):\n%s", diff)
	}
}

// The kubelet omits an empty "entries" map (omitempty on its Go type), so
// data "{}" is a file of the known format that lists no pod.
func TestReadAllocatedPodsEmptyAndShapes(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		uids       []string
		problem    string
	}{
		{"empty data", `{"data":"{}","checksum":1}`, nil, ""},
		{"empty entries", `{"data":"{\"entries\":{}}","checksum":1}`, nil, ""},
		{"one pod", `{"data":"{\"entries\":{\"u1\":{}}}","checksum":1}`, []string{"u1"}, ""},
		{"other keys", `{"data":"{\"podResources\":{}}","checksum":1}`, nil, `unknown format: data has no "entries" map`},
		{"entries not a map", `{"data":"{\"entries\":[]}","checksum":1}`, nil, `unknown format: data's "entries" is not a map`},
		{"data not an object", `{"data":"[]","checksum":1}`, nil, "unknown format: data is not a JSON object"},
		{"no envelope", `{"entries":{}}`, nil, `unknown format: want {"data": "...", "checksum": N}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uids, err := parseAllocatedPods([]byte(tc.data))
			if diff := cmp.Diff(tc.uids, uids, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("uids (-want +got):\n%s", diff)
			}
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.problem {
				t.Errorf("problem = %q, want %q", got, tc.problem)
			}
		})
	}
}

// AdmittedAt is the newest modification time of the kubelet files read:
// every listed pod was admitted at or before it.
func TestReadHintsAdmittedAt(t *testing.T) {
	dir := t.TempDir()
	alloc := filepath.Join(dir, "allocated_pods_state")
	dev := filepath.Join(dir, "device-plugins", "kubelet_internal_checkpoint")
	writeFile(t, alloc, `{"data":"{\"entries\":{\"u1\":{}}}","checksum":1}`)
	if err := os.MkdirAll(filepath.Dir(dev), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dev, `{"Data":{"PodDeviceEntries":[{"PodUID":"u2"}]},"Checksum":1}`)
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Minute)
	for p, at := range map[string]time.Time{alloc: t1, dev: t2} {
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	src := KubeletHintSources(dir, "")
	if src.AllocatedPodsState != alloc || src.DeviceCheckpoint != dev {
		t.Fatalf("KubeletHintSources(%s) = %+v", dir, src)
	}
	got := ReadHints(src)
	want := Hints{AdmittedPodUIDs: []string{"u1", "u2"}, AdmittedAt: t2}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
