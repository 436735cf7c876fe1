package health

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TCPConn is one established TCP connection of this network namespace as
// the kernel sees it (sock_diag, what `ss -ti` shows): its ends and the
// state of what it sent.
type TCPConn struct {
	Src, Dst netip.AddrPort
	// Unacked counts the segments sent and not yet acknowledged.
	Unacked uint32
	// Retransmits counts the retransmissions in a row of the oldest
	// unacknowledged segment (any acknowledgement resets it); Backoff is
	// the retransmission timer's exponential backoff.
	Retransmits, Backoff uint8
	// SinceAck is how long ago the last acknowledgement came.
	SinceAck time.Duration
}

// SilentRetransmits is how many retransmissions in a row of the same data,
// with nothing acknowledged, make a peer silent: with Linux's 200 ms
// minimum retransmission timeout, doubling, the fourth comes about 3 s
// after the data was sent. A link that loses packets but works gets an
// acknowledgement within one or two.
const SilentRetransmits = 4

// SilentPeers returns, among dsts, the peers of connections that stopped
// answering: data sent, unacknowledged, retransmitted SilentRetransmits
// times in a row. A peer that is slow to answer (a long prompt batch on a
// worker) is not silent: its kernel acknowledges what it receives, so
// nothing stays unacknowledged (issue 21, item 6; slurm-facts 26: llama.cpp's
// RPC has no timeout and no keepalive, so only the kernel sees this).
func SilentPeers(conns []TCPConn, dsts []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, d := range dsts {
		for _, c := range conns {
			if c.Dst == d && c.Unacked > 0 && c.Retransmits >= SilentRetransmits {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// TCPConns lists the established TCP connections (IPv4 and IPv6) of the
// calling thread's network namespace, with their tcp_info, through one
// sock_diag dump per family.
func TCPConns() ([]TCPConn, error) {
	var out []TCPConn
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		conns, err := dumpTCP(family)
		if err != nil {
			return nil, fmt.Errorf("tcp connections: %w", err)
		}
		out = append(out, conns...)
	}
	return out, nil
}

// Sizes and offsets of the kernel's structs (linux/inet_diag.h, tcp.h).
const (
	nlmsgHdrLen    = 16
	inetDiagReqLen = 56 // inet_diag_req_v2
	inetDiagMsgLen = 72 // inet_diag_msg
	inetDiagInfo   = 2  // INET_DIAG_INFO: the struct tcp_info attribute
	tcpEstablished = 1
	// tcp_info offsets.
	tiRetransmits = 2
	tiBackoff     = 4
	tiUnacked     = 24
	tiLastAckRecv = 56
	tiMinLen      = 60
)

// dumpTCP asks for every established TCP socket of family with its
// tcp_info and parses the answer.
func dumpTCP(family uint8) ([]TCPConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.Timeval{Sec: 2}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	req := make([]byte, nlmsgHdrLen+inetDiagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // seq
	req[16], req[17] = family, unix.IPPROTO_TCP
	req[18] = 1 << (inetDiagInfo - 1)         // idiag_ext: ask for tcp_info
	ne.PutUint32(req[20:], 1<<tcpEstablished) // idiag_states
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	var out []TCPConn
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			return nil, fmt.Errorf("netlink receive: %w", err)
		}
		done, err := parseDiag(buf[:n], family, &out)
		if err != nil || done {
			return out, err
		}
	}
}

// parseDiag parses one datagram of netlink messages into out; done is set
// at the dump's end.
func parseDiag(b []byte, family uint8, out *[]TCPConn) (done bool, err error) {
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			return false, errors.New("netlink: truncated message")
		}
		switch ne.Uint16(b[4:]) {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if l >= nlmsgHdrLen+4 {
				if errno := int32(ne.Uint32(b[nlmsgHdrLen:])); errno != 0 {
					return true, fmt.Errorf("netlink: %w", syscall.Errno(-errno))
				}
			}
			return true, nil
		case unix.SOCK_DIAG_BY_FAMILY:
			if c, ok := parseConn(b[nlmsgHdrLen:l], family); ok {
				*out = append(*out, c)
			}
		}
		if align4(l) >= len(b) {
			break
		}
		b = b[align4(l):]
	}
	return false, nil
}

func align4(n int) int { return (n + 3) &^ 3 }

// parseConn reads one inet_diag_msg and its tcp_info attribute.
func parseConn(m []byte, family uint8) (TCPConn, bool) {
	if len(m) < inetDiagMsgLen {
		return TCPConn{}, false
	}
	ne := binary.NativeEndian
	addr := func(b []byte) netip.Addr {
		if family == unix.AF_INET {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16([16]byte(b[:16])).Unmap()
	}
	sport, dport := binary.BigEndian.Uint16(m[4:]), binary.BigEndian.Uint16(m[6:])
	c := TCPConn{Src: netip.AddrPortFrom(addr(m[8:24]), sport), Dst: netip.AddrPortFrom(addr(m[24:40]), dport)}
	for a := m[inetDiagMsgLen:]; len(a) >= 4; {
		l, typ := int(ne.Uint16(a[0:])), ne.Uint16(a[2:])
		if l < 4 || l > len(a) {
			break
		}
		if typ == inetDiagInfo && l-4 >= tiMinLen {
			ti := a[4:l]
			c.Retransmits, c.Backoff = ti[tiRetransmits], ti[tiBackoff]
			c.Unacked = ne.Uint32(ti[tiUnacked:])
			c.SinceAck = time.Duration(ne.Uint32(ti[tiLastAckRecv:])) * time.Millisecond
		}
		if align4(l) >= len(a) {
			break
		}
		a = a[align4(l):]
	}
	return c, true
}
