package access

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Users maps a uid munge proved to a user name, and says whether a user
// is in a group (the admin group).
type Users interface {
	Name(uid uint32) (string, error)
	InGroup(name, group string) (bool, error)
}

// OSUsers asks the system's user database. os/user is the C library's (so
// NSS: LDAP, SSSD) only in a binary built with cgo; built without (no C
// compiler on the build machine, CGO_ENABLED=0) it reads /etc/passwd and
// /etc/group alone, and a cluster's users are rarely there. So what os/user
// cannot find is asked of getent(1) and id(1), which go through NSS.
type OSUsers struct {
	// Run runs a lookup command and returns its standard output; nil runs
	// it (a test's stand-in otherwise).
	Run func(ctx context.Context, name string, args ...string) ([]byte, error)
}

// lookupTimeout bounds one getent or id: a directory server that does not
// answer must not hold a key request for long.
const lookupTimeout = 5 * time.Second

func (o OSUsers) run(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	if o.Run != nil {
		return o.Run(ctx, name, args...)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return out, nil
}

// Name is uid's user name.
func (o OSUsers) Name(uid uint32) (string, error) {
	id := strconv.FormatUint(uint64(uid), 10)
	u, err := user.LookupId(id)
	if err == nil {
		return u.Username, nil
	}
	if !unknown(err) {
		return "", fmt.Errorf("uid %d: %w", uid, err)
	}
	// getent passwd UID: "name:x:uid:gid:gecos:home:shell"; exit 2 when
	// there is no such user.
	out, gerr := o.run("getent", "passwd", id)
	if gerr != nil {
		return "", fmt.Errorf("uid %d: %w (and getent: %v)", uid, err, gerr)
	}
	f := strings.Split(strings.TrimSpace(firstLine(out)), ":")
	if len(f) < 3 || f[0] == "" || f[2] != id {
		return "", fmt.Errorf("uid %d: %w (getent passwd answered %q)", uid, err, firstLine(out))
	}
	return f[0], nil
}

// InGroup reports whether name is a member of group (primary or not).
func (o OSUsers) InGroup(name, group string) (bool, error) {
	g, gerr := user.LookupGroup(group)
	u, uerr := user.Lookup(name)
	if gerr == nil && uerr == nil {
		gids, err := u.GroupIds()
		if err != nil {
			return false, fmt.Errorf("groups of %s: %w", name, err)
		}
		return u.Gid == g.Gid || slices.Contains(gids, g.Gid), nil
	}
	for _, err := range []error{gerr, uerr} {
		if err != nil && !unknown(err) {
			return false, err
		}
	}
	// id -Gn NAME lists every group of the user, its primary one among
	// them, through NSS (initgroups).
	out, err := o.run("id", "-Gn", "--", name)
	if err != nil {
		return false, fmt.Errorf("groups of %s: %w", name, err)
	}
	return slices.Contains(strings.Fields(firstLine(out)), group), nil
}

// unknown: os/user did not find the user or group (as opposed to failing
// to look).
func unknown(err error) bool {
	var uid user.UnknownUserIdError
	var un user.UnknownUserError
	var gn user.UnknownGroupError
	var gid user.UnknownGroupIdError
	return errors.As(err, &uid) || errors.As(err, &un) || errors.As(err, &gn) || errors.As(err, &gid)
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return s
}
