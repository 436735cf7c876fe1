package access

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestOSUsersAskNSSWhatOSUserCannotFind: a uid that is not in /etc/passwd
// (an LDAP or SSSD user, with the binary built without cgo) is asked of
// getent, and a user's groups of id, both through NSS; a directory that
// has no such user stays an error that names the uid.
func TestOSUsersAskNSSWhatOSUserCannotFind(t *testing.T) {
	const uid = 3999877 // in no test machine's /etc/passwd
	var asked []string
	o := OSUsers{Run: func(_ context.Context, name string, args ...string) ([]byte, error) {
		asked = append(asked, name+" "+strings.Join(args, " "))
		switch name + " " + strings.Join(args, " ") {
		case "getent passwd 3999877":
			return []byte("ldapuser:*:3999877:5000:LDAP User:/home/ldapuser:/bin/bash\n"), nil
		case "id -Gn -- ldapuser":
			return []byte("physics llm-admins\n"), nil
		}
		return nil, errors.New("exit status 2")
	}}
	name, err := o.Name(uid)
	if err != nil || name != "ldapuser" {
		t.Fatalf("Name(%d) = %q, %v; want ldapuser (asked %q)", uid, name, err, asked)
	}
	if ok, err := o.InGroup("ldapuser", "llm-admins"); err != nil || !ok {
		t.Errorf("InGroup(ldapuser, llm-admins) = %v, %v; want true", ok, err)
	}
	if ok, err := o.InGroup("ldapuser", "wheel-not-here"); err != nil || ok {
		t.Errorf("InGroup(ldapuser, wheel-not-here) = %v, %v; want false", ok, err)
	}
	if _, err := o.Name(uid + 1); err == nil || !strings.Contains(err.Error(), "uid 3999878") {
		t.Errorf("an unknown uid: %v, want an error naming it", err)
	}
	// A user os/user knows is not asked of getent.
	asked = nil
	if name, err := o.Name(0); err != nil || name != "root" || len(asked) != 0 {
		t.Errorf("Name(0) = %q, %v, asked %q", name, err, asked)
	}
}

// TestOSUsersRunsGetent: the real getent(1) answers for root.
func TestOSUsersRunsGetent(t *testing.T) {
	out, err := OSUsers{}.run("getent", "passwd", "0")
	if err != nil {
		t.Skipf("no getent here: %v", err)
	}
	if !strings.HasPrefix(string(out), "root:") {
		t.Errorf("getent passwd 0 = %q", out)
	}
}
