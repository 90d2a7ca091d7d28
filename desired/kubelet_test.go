package desired

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// kubeletCapture is testdata/kubelet: files a real kubelet v1.37.2 wrote
// (see its README.md and capture.sh).
const kubeletCapture = "testdata/kubelet"

// capturedUIDs maps the pod names of a capture's pods.txt (a, b, c, d) to
// their UIDs: every pod the capture made is named in 1-admitted or
// 3-readmitted.
func capturedUIDs(t *testing.T) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for _, stage := range []string{"1-admitted", "3-readmitted"} {
		b, err := os.ReadFile(filepath.Join(kubeletCapture, stage, "pods.txt"))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			name, uid, ok := strings.Cut(l, " ")
			if !ok {
				t.Fatalf("%s/pods.txt: bad line %q", stage, l)
			}
			uids[name] = uid
		}
	}
	if len(uids) != 4 {
		t.Fatalf("capture names pods %v, want a, b, c, d", uids)
	}
	return uids
}

// TestReadHintsFromRealKubelet reads each moment of the capture as the
// agent does, with the kubelet's root dir as --kubelet-root-dir. After b
// and c were deleted the file still lists them; the next admission drops
// them. The device-plugin checkpoint never exists without a device plugin.
func TestReadHintsFromRealKubelet(t *testing.T) {
	u := capturedUIDs(t)
	for _, tc := range []struct {
		stage string
		pods  []string // listed in allocated_pods_state
		alive []string // pods the kubelet still has (pods.txt)
	}{
		{"0-started", nil, nil},
		{"1-admitted", []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"2-deleted", []string{"a", "b", "c"}, []string{"a"}},
		{"3-readmitted", []string{"a", "d"}, []string{"a", "d"}},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			dir := filepath.Join(kubeletCapture, tc.stage)
			src := KubeletHintSources(dir, "")
			got := ReadHints(src)
			want := Hints{AdmittedPodUIDs: names(u, tc.pods), Absent: []string{src.DeviceCheckpoint}}
			if tc.pods == nil {
				want.Absent = []string{src.AllocatedPodsState, src.DeviceCheckpoint}
			} else if got.AdmittedAt.IsZero() {
				t.Error("AdmittedAt is zero")
			}
			got.AdmittedAt = want.AdmittedAt // the checkout's time
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			b, err := os.ReadFile(filepath.Join(dir, "pods.txt"))
			if err != nil {
				t.Fatal(err)
			}
			var alive []string
			for _, l := range strings.Fields(string(b)) {
				if len(l) == 32 {
					alive = append(alive, l)
				}
			}
			sort.Strings(alive)
			if diff := cmp.Diff(names(u, tc.alive), alive); diff != "" {
				t.Errorf("pods the kubelet has (-want +got):\n%s", diff)
			}
		})
	}
}

// actuated_pods_state has allocated_pods_state's format and keeps deleted
// pods even after the next admission: enid does not read it.
func TestRealKubeletActuatedState(t *testing.T) {
	u := capturedUIDs(t)
	b, err := os.ReadFile(filepath.Join(kubeletCapture, "3-readmitted", "actuated_pods_state"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseAllocatedPods(b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(names(u, []string{"a", "b", "c", "d"}), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// names maps pod names to their UIDs, sorted (nil for none).
func names(uids map[string]string, pods []string) []string {
	var out []string
	for _, p := range pods {
		out = append(out, uids[p])
	}
	sort.Strings(out)
	return out
}
