package doctor

import (
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// Dir is one directory an install needs, from the loaded config, and
// what is expected of it.
type Dir struct {
	Path string
	// Role names it in messages ("endpoint_dir").
	Role string
	// MadeByUnit says a unit's StateDirectory=/RuntimeDirectory= makes it
	// at the first start, so its absence is fine.
	MadeByUnit bool
	// Owners are the accounts that may own it (allowed_owners); empty for
	// any. Owner is the account an `install -d` fix names.
	Owners []string
	Owner  string
}

// CheckDir checks d as Stat saw it: there (or made by its unit), a real
// directory, not writable by others (anyone could plant or squat files
// there: issue 23), and owned by one of its owners.
func CheckDir(d Dir, e Entry) Result {
	c := "dir." + d.Role
	owner := d.Owner
	if owner == "" {
		owner = "root"
	}
	mk := fmt.Sprintf("install -d -o %s -g %s -m 0755 %s", owner, owner, d.Path)
	switch {
	case e.NotExist && d.MadeByUnit:
		return ok(c, d.Path+": absent; its unit makes it at the first start")
	case e.NotExist:
		return fail(c, d.Path+": does not exist", mk)
	case e.Err != nil:
		return warn(c, fmt.Sprintf("%s: unknown: %v", d.Path, e.Err), "as root: ls -ld "+d.Path)
	case e.IsSymlink:
		return fail(c, d.Path+": a symlink, not a directory (its target could change under the files)", "rm "+d.Path+" && "+mk)
	case !e.IsDir:
		return fail(c, d.Path+": not a directory", "rm "+d.Path+" && "+mk)
	case e.Mode&0o002 != 0:
		return fail(c, fmt.Sprintf("%s: writable by others (mode %s): anyone could plant or squat files there", d.Path, octal(e.Mode)),
			fmt.Sprintf("chmod 0755 %s (0775 if the group must remove files); chown %s %s", d.Path, owner, d.Path))
	}
	who := ownerName(e)
	if len(d.Owners) > 0 && !slices.Contains(d.Owners, e.Owner) {
		return warn(c, fmt.Sprintf("%s: owned by %s, not by %s", d.Path, who, strings.Join(d.Owners, " or ")),
			fmt.Sprintf("chown %s %s", owner, d.Path))
	}
	return ok(c, fmt.Sprintf("%s: directory, owner %s, mode %s", d.Path, who, octal(e.Mode)))
}

func octal(m fs.FileMode) string {
	v := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

func ownerName(e Entry) string {
	if e.Owner != "" {
		return e.Owner
	}
	return fmt.Sprintf("uid %d", e.UID)
}
