package desired

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func validEntry() Entry {
	return Entry{
		APIVersion:   EntryAPIVersion,
		ContainerID:  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		IfName:       "eth0",
		NetNS:        "/var/run/netns/cni-1234",
		PodNamespace: "default",
		PodName:      "web-0",
		PodUID:       "5f1c2d3e-aaaa-bbbb-cccc-0123456789ab",
		Annotations:  map[string]string{AnnotationStickyIP: "true", "kubernetes.io/ingress-bandwidth": "10M"},
		Bandwidth:    &Bandwidth{IngressRate: 10_000_000, IngressBurst: 1_000_000},
		Created:      time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC),
	}
}

func TestEntryValidation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Entry)
		want   string // "" for valid, else the problem text after "invalid entry: "
	}{
		{"valid", func(*Entry) {}, ""},
		{"no pod UID, annotations or bandwidth", func(e *Entry) { e.PodUID, e.Annotations, e.Bandwidth = "", nil, nil }, ""},
		{"proc netns", func(e *Entry) { e.NetNS = "/proc/4242/ns/net" }, ""},
		{"static pod UID", func(e *Entry) { e.PodUID = "9d1c4f2b8a7e6d5c4b3a29181716a5b4" }, ""},
		{"dotted pod name", func(e *Entry) { e.PodName = "coredns.v1-0" }, ""},
		{"ifName of 15", func(e *Entry) { e.IfName = "abcdefghijklmno" }, ""},
		{"container ID with _ . -", func(e *Entry) { e.ContainerID = "abc_def.1-2" }, ""},
		{"apiVersion", func(e *Entry) { e.APIVersion = "v1" }, `apiVersion: must be "enid.dev/v1alpha1" (got "v1")`},
		{"no container ID", func(e *Entry) { e.ContainerID = "" }, `containerID: required`},
		{"container ID traversal", func(e *Entry) { e.ContainerID = "../../etc/passwd" }, `containerID: must be letters, digits, '_', '.' and '-', starting with a letter or digit (got "../../etc/passwd")`},
		{"container ID slash", func(e *Entry) { e.ContainerID = "a/b" }, `containerID: must be letters, digits, '_', '.' and '-', starting with a letter or digit (got "a/b")`},
		{"container ID leading dot", func(e *Entry) { e.ContainerID = ".abc" }, `containerID: must be letters, digits, '_', '.' and '-', starting with a letter or digit (got ".abc")`},
		{"container ID too long", func(e *Entry) { e.ContainerID = strings.Repeat("a", 129) }, `containerID: longer than 128 characters (got 129)`},
		{"no ifName", func(e *Entry) { e.IfName = "" }, `ifName: required`},
		{"ifName of 16", func(e *Entry) { e.IfName = "abcdefghijklmnop" }, `ifName: longer than 15 bytes (got "abcdefghijklmnop")`},
		{"ifName dotdot", func(e *Entry) { e.IfName = ".." }, `ifName: not a valid interface name (got "..")`},
		{"ifName slash", func(e *Entry) { e.IfName = "a/b" }, `ifName: must be printable ASCII without '/', ':', '_' or spaces (got "a/b")`},
		{"ifName colon", func(e *Entry) { e.IfName = "eth0:1" }, `ifName: must be printable ASCII without '/', ':', '_' or spaces (got "eth0:1")`},
		{"ifName space", func(e *Entry) { e.IfName = "eth 0" }, `ifName: must be printable ASCII without '/', ':', '_' or spaces (got "eth 0")`},
		{"ifName underscore", func(e *Entry) { e.IfName = "eth_0" }, `ifName: must be printable ASCII without '/', ':', '_' or spaces (got "eth_0")`},
		{"ifName non-ASCII", func(e *Entry) { e.IfName = "ethé" }, `ifName: must be printable ASCII without '/', ':', '_' or spaces (got "ethé")`},
		{"no netns", func(e *Entry) { e.NetNS = "" }, `netns: required`},
		{"relative netns", func(e *Entry) { e.NetNS = "netns/x" }, `netns: must be a clean absolute path without '..' (got "netns/x")`},
		{"netns traversal", func(e *Entry) { e.NetNS = "/var/run/netns/../../etc" }, `netns: must be a clean absolute path without '..' (got "/var/run/netns/../../etc")`},
		{"netns too long", func(e *Entry) { e.NetNS = "/" + strings.Repeat("a", 4096) }, `netns: longer than 4096 bytes`},
		{"namespace upper", func(e *Entry) { e.PodNamespace = "Default" }, `podNamespace: must be a DNS-1123 label (got "Default")`},
		{"namespace dotted", func(e *Entry) { e.PodNamespace = "a.b" }, `podNamespace: must be a DNS-1123 label (got "a.b")`},
		{"namespace too long", func(e *Entry) { e.PodNamespace = strings.Repeat("a", 64) }, `podNamespace: must be a DNS-1123 label (got "` + strings.Repeat("a", 64) + `")`},
		{"no pod name", func(e *Entry) { e.PodName = "" }, `podName: must be a DNS-1123 subdomain (got "")`},
		{"pod name slash", func(e *Entry) { e.PodName = "../x" }, `podName: must be a DNS-1123 subdomain (got "../x")`},
		{"pod UID", func(e *Entry) { e.PodUID = "abc/def" }, `podUID: must be letters, digits and '-' (got "abc/def")`},
		{"annotation key", func(e *Entry) { e.Annotations = map[string]string{"bad key": "x"} }, `annotations[bad key]: not a valid annotation key`},
		{"annotation prefix", func(e *Entry) { e.Annotations = map[string]string{"Example.com/x": "x"} }, `annotations[Example.com/x]: not a valid annotation key`},
		{"no created", func(e *Entry) { e.Created = time.Time{} }, `created: required`},
		{"several at once", func(e *Entry) { e.IfName, e.PodName = "", "" }, `ifName: required; podName: must be a DNS-1123 subdomain (got "")`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := validEntry()
			tc.mutate(&e)
			err := e.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("want ErrInvalidEntry, got %v", err)
			}
			if diff := cmp.Diff("invalid entry: "+tc.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseEntryIsStrict(t *testing.T) {
	good := `{"apiVersion":"enid.dev/v1alpha1","containerID":"c1","ifName":"eth0","netns":"/proc/1/ns/net","podNamespace":"ns","podName":"p","created":"2026-11-30T01:02:03Z"}`
	e, err := ParseEntry([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision != Revision([]byte(good)) || len(e.Revision) != 16 {
		t.Errorf("revision %q, want %q", e.Revision, Revision([]byte(good)))
	}
	big := strings.Replace(good, `}`, `,"annotations":{"a":"`+strings.Repeat("x", MaxEntrySize)+`"}}`, 1)
	tests := []struct{ name, doc, want string }{
		{"unknown field", strings.Replace(good, `"ifName"`, `"ifname":"x","ifName"`, 1), `invalid entry: ifname: unknown field (did you mean "ifName"?)`},
		{"case differs", strings.Replace(good, `"containerID"`, `"ContainerID"`, 1), `invalid entry: ContainerID: unknown field (did you mean "containerID"?)`},
		{"duplicate key", strings.Replace(good, `"ifName":"eth0"`, `"ifName":"eth0","ifName":"eth1"`, 1), `invalid entry: ifName: duplicate key`},
		{"revision is not a field", strings.Replace(good, `}`, `,"Revision":"x"}`, 1), `invalid entry: Revision: unknown field`},
		{"trailing data", good + `{}`, `invalid entry: not valid JSON: data after the end of the document`},
		{"not an object", `[]`, `invalid entry: must be a JSON object (got a list)`},
		{"truncated", good[:40], `invalid entry: not valid JSON: unexpected EOF`},
		{"wrong type", strings.Replace(good, `"podName":"p"`, `"podName":7`, 1), `invalid entry: podName: must be a string (got 7)`},
		{"bandwidth field", strings.Replace(good, `}`, `,"bandwidth":{"ingressrate":1}}`, 1), `invalid entry: bandwidth.ingressrate: unknown field (did you mean "ingressRate"?)`},
		{"too large", big, fmt.Sprintf("invalid entry: %d bytes, more than the 524288 allowed", len(big))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEntry([]byte(tc.doc))
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("want ErrInvalidEntry, got %v", err)
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeyFromFileName(t *testing.T) {
	tests := []struct {
		name string
		want Key
		ok   bool
	}{
		{"abc_eth0.json", Key{ContainerID: "abc", IfName: "eth0"}, true},
		{"a_b_c_net1.json", Key{ContainerID: "a_b_c", IfName: "net1"}, true},
		{"abc_eth0", Key{}, false},
		{"abc.json", Key{}, false},
		{"_eth0.json", Key{}, false},
		{"abc_.json", Key{}, false},
		{"..._eth0.json", Key{}, false},
	}
	for _, tc := range tests {
		got, ok := KeyFromFileName(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("KeyFromFileName(%q) = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
		if ok && EntryFileName(got) != tc.name {
			t.Errorf("EntryFileName(%v) = %q, want %q", got, EntryFileName(got), tc.name)
		}
	}
}

func TestWantsStickyIP(t *testing.T) {
	for _, tc := range []struct {
		ann  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{AnnotationStickyIP: "true"}, true},
		{map[string]string{AnnotationTerwayIPReservation: "true"}, true},
		{map[string]string{AnnotationStickyIP: "false", AnnotationTerwayIPReservation: "yes"}, false},
	} {
		if got := (Entry{Annotations: tc.ann}).WantsStickyIP(); got != tc.want {
			t.Errorf("%v: got %v, want %v", tc.ann, got, tc.want)
		}
	}
}
