package access

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// socketOwner is the uid owning the other end of a TCP connection on
// this host: the socket whose local address is remote and whose peer is
// local, as /proc/net/tcp (or tcp6) lists it (`ss -tne` shows the same
// uid:). The peer of a loopback connection is a socket of this host's, in
// this network namespace, so it is there; one from elsewhere is not.
func socketOwner(local, remote netip.AddrPort) (uint32, error) {
	local, remote = unmap(local), unmap(remote)
	// Both tables: a dual-stack socket lists an IPv4 peer in tcp6 as
	// ::ffff:a.b.c.d (read back unmapped).
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // no IPv6 in this kernel
			}
			return 0, fmt.Errorf("socket owner: %w", err)
		}
		uid, err := findOwner(bufio.NewScanner(f), local, remote)
		f.Close()
		if !errors.Is(err, errNoSocket) {
			return uid, err
		}
	}
	return 0, errNoSocket
}

// findOwner reads /proc/net/tcp lines: "sl local rem st queues tr retr
// uid timeout inode …", addresses as the kernel's hex words.
func findOwner(sc *bufio.Scanner, local, remote netip.AddrPort) (uint32, error) {
	sc.Scan() // the header line
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		l, err1 := parseProcAddr(f[1])
		r, err2 := parseProcAddr(f[2])
		if err1 != nil || err2 != nil || l != remote || r != local {
			continue
		}
		uid, err := strconv.ParseUint(f[7], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("socket owner: uid %q: %w", f[7], err)
		}
		return uint32(uid), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("socket owner: %w", err)
	}
	return 0, errNoSocket
}

// errNoSocket: the peer's socket is not on this host (or already closed).
var errNoSocket = errors.New("socket owner: the peer's socket is not on this host")

// parseProcAddr reads "0100007F:1F90" (IPv4: one 32-bit word in host
// order, little-endian here) or the IPv6 form (four such words).
func parseProcAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	b, err := hex.DecodeString(h)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	for i := 0; i < len(b); i += 4 { // each 32-bit word is little-endian
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(unmapAddr(a), uint16(port)), nil
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(unmapAddr(ap.Addr()), ap.Port())
}

func unmapAddr(a netip.Addr) netip.Addr {
	if a.Is4In6() {
		return a.Unmap()
	}
	return a
}
