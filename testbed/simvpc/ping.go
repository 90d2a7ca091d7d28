package simvpc

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pingInterval is how long one echo request waits for its reply before
// the next is sent.
const pingInterval = 200 * time.Millisecond

// Ping sends ICMP (or ICMPv6) echo requests to dst from inside the
// namespace at nsPath until one is answered (nil) or ctx ends (an error).
// It opens a raw socket inside the namespace, so it needs root, and does
// not depend on a ping binary. Safe for concurrent use.
func Ping(ctx context.Context, nsPath string, dst netip.Addr) error {
	dst = dst.Unmap()
	conn, err := rawICMP(nsPath, dst.Is6())
	if err != nil {
		return fmt.Errorf("ping %s from %s: %w", dst, nsPath, err)
	}
	defer func() { _ = conn.Close() }() // nothing useful to report after the answer
	var idb [2]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	id := binary.BigEndian.Uint16(idb[:])
	var lastErr error
	for seq := uint16(1); ; seq++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("ping %s from %s: no reply (%v): %w", dst, nsPath, lastErr, err)
		}
		if _, err := conn.WriteTo(echo(dst.Is6(), id, seq), &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			lastErr = err
		} else if err := awaitReply(ctx, conn, dst, id, seq); err == nil {
			return nil
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(pingInterval / 4):
		}
	}
}

// rawICMP opens a raw ICMP socket inside the namespace; the socket stays
// bound to that namespace wherever it is used from.
func rawICMP(nsPath string, v6 bool) (net.PacketConn, error) {
	var fd int
	err := InNS(nsPath, func() error {
		var err error
		if v6 {
			fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		} else {
			fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("raw socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "icmp")
	defer func() { _ = f.Close() }() // FilePacketConn holds its own duplicate
	c, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("raw socket: %w", err)
	}
	return c, nil
}

// echo builds an echo request; the kernel fills the ICMPv6 checksum.
func echo(v6 bool, id, seq uint16) []byte {
	b := make([]byte, 8+16)
	b[0] = 8
	if v6 {
		b[0] = 128
	}
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	copy(b[8:], "enid-linuxtest!!")
	if !v6 {
		binary.BigEndian.PutUint16(b[2:], checksum(b))
	}
	return b
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// awaitReply reads until the echo reply for (id, seq) from dst arrives or
// pingInterval passes. Its clock, as ping's, is the wall clock: a socket's
// read deadline is.
func awaitReply(ctx context.Context, conn net.PacketConn, dst netip.Addr, id, seq uint16) error {
	deadline := time.Now().Add(pingInterval)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetReadDeadline(deadline); err != nil {
		return err
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return err
		}
		src, ok := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		if !ok || src.Unmap() != dst {
			continue
		}
		b := buf[:n]
		want := byte(129)
		if dst.Is4() {
			if len(b) < 20 {
				continue
			}
			b = b[int(b[0]&0x0f)*4:] // IPv4 raw sockets deliver the IP header
			want = 0
		}
		if len(b) < 8 || b[0] != want {
			continue
		}
		if binary.BigEndian.Uint16(b[4:]) == id && binary.BigEndian.Uint16(b[6:]) == seq {
			return nil
		}
	}
}
