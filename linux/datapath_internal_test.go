package linux

import (
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/enidnet/enid/observed"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

func TestHostVethName(t *testing.T) {
	a := observed.AttachmentKey{ContainerID: strings.Repeat("a", 64), IfName: "eth0"}
	b := observed.AttachmentKey{ContainerID: strings.Repeat("a", 64), IfName: "eth1"}
	for _, k := range []observed.AttachmentKey{a, b} {
		n := HostVethName(k)
		if len(n) > 15 || !strings.HasPrefix(n, "enid") || n != HostVethName(k) {
			t.Errorf("HostVethName(%v) = %q", k, n)
		}
		if s := svcVethName(k); len(s) > 15 || s == n {
			t.Errorf("svcVethName(%v) = %q", k, s)
		}
	}
	if HostVethName(a) == HostVethName(b) {
		t.Error("two attachments share a name")
	}
}

func TestLabelRoundTrip(t *testing.T) {
	cases := []label{
		{Key: observed.AttachmentKey{ContainerID: strings.Repeat("f", 64), IfName: "eth0"}, NetNS: "/var/run/netns/cni-1234 with space%", Mode: modeShared, ENI: "00:16:3e:00:00:01",
			IPv4: netip.MustParseAddr("10.0.0.9"), IPv6: netip.MustParseAddr("2408:4005:39c:8d00:ffff:ffff:ffff:fffe")},
		{Key: observed.AttachmentKey{ContainerID: "c", IfName: "net_1"}, Mode: modeExclusive, ENI: "00:16:3e:00:00:02", Orig: "eth2", Up: true},
	}
	for _, want := range cases {
		s := want.String()
		if len(s) > maxAlias {
			t.Errorf("alias %d bytes: %q", len(s), s)
		}
		got, ok := parseLabel(s)
		if !ok {
			t.Fatalf("parse %q failed", s)
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("round trip of %q (-want +got):\n%s", s, diff)
		}
	}
	long := cases[0]
	long.NetNS = "/" + strings.Repeat("n", 200)
	got, ok := parseLabel(long.String())
	if !ok || got.NetNS != "" || got.Key != long.Key || got.IPv6 != long.IPv6 {
		t.Errorf("over-long alias: ok=%v got %+v", ok, got)
	}
	for _, bad := range []string{"", "enid:v1 ", "enid:v1 cid=x", "something else", "enid:v1 cid=x if=y ip4=nope"} {
		if _, ok := parseLabel(bad); ok {
			t.Errorf("parseLabel(%q) accepted", bad)
		}
	}
}

// TestConcerns: Watch looks at every link and address change, and at
// routes and rules only when they carry enid's protocol.
func TestConcerns(t *testing.T) {
	rt := func(typ uint16, proto byte) syscall.NetlinkMessage {
		d := make([]byte, unix.SizeofRtMsg)
		d[5] = proto
		return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: typ}, Data: d}
	}
	rule := func(typ uint16, proto byte) syscall.NetlinkMessage {
		d := make([]byte, unix.SizeofRtMsg)
		attr := nl.NewRtAttr(unix.FRA_PROTOCOL, []byte{proto})
		d = append(d, attr.Serialize()...)
		return syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: typ}, Data: d}
	}
	for _, tc := range []struct {
		name string
		m    syscall.NetlinkMessage
		want bool
	}{
		{"link", syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.RTM_DELLINK}}, true},
		{"addr", syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.RTM_DELADDR}}, true},
		{"enid route", rt(unix.RTM_DELROUTE, Proto), true},
		{"kernel route", rt(unix.RTM_NEWROUTE, unix.RTPROT_KERNEL), false},
		{"enid rule", rule(unix.RTM_DELRULE, Proto), true},
		{"other rule", rule(unix.RTM_NEWRULE, unix.RTPROT_BOOT), false},
		{"neighbour", syscall.NetlinkMessage{Header: syscall.NlMsghdr{Type: unix.RTM_NEWNEIGH}}, false},
	} {
		if got := concerns(tc.m); got != tc.want {
			t.Errorf("%s: concerns = %v, want %v", tc.name, got, tc.want)
		}
	}
}
