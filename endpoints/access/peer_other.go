//go:build !linux

package access

import (
	"errors"
	"net/netip"
)

// socketOwner is known on Linux only: elsewhere no proxy's user can be
// checked, and trusted_proxy_users must be [] to believe any.
func socketOwner(local, remote netip.AddrPort) (uint32, error) {
	return 0, errors.New("socket owner: only known on Linux")
}
