package access

import (
	"fmt"
	"os/user"
	"slices"
	"strconv"
)

// Users maps a uid munge proved to a user name, and says whether a user
// is in a group (the admin group).
type Users interface {
	Name(uid uint32) (string, error)
	InGroup(name, group string) (bool, error)
}

// OSUsers asks the system's user database (os/user: the C library's, so
// NSS (LDAP, SSSD) where the binary is built with cgo, the default;
// /etc/passwd and /etc/group only without cgo).
type OSUsers struct{}

// Name is uid's user name.
func (OSUsers) Name(uid uint32) (string, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return "", fmt.Errorf("uid %d: %w", uid, err)
	}
	return u.Username, nil
}

// InGroup reports whether name is a member of group (primary or not).
func (OSUsers) InGroup(name, group string) (bool, error) {
	g, err := user.LookupGroup(group)
	if err != nil {
		return false, fmt.Errorf("group %s: %w", group, err)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return false, fmt.Errorf("user %s: %w", name, err)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return false, fmt.Errorf("groups of %s: %w", name, err)
	}
	return u.Gid == g.Gid || slices.Contains(gids, g.Gid), nil
}
