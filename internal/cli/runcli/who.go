package runcli

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
)

// Who names the caller in audit entries: "uid=0(root) via cli", plus the
// user sudo was run by; face is the face the caller used ("cli", "mcp",
// "api").
func Who(face string) string {
	uid := os.Getuid()
	name := os.Getenv("USER")
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	s := fmt.Sprintf("uid=%d(%s)", uid, name)
	if su := os.Getenv("SUDO_USER"); su != "" && uid == 0 {
		s += " sudo_user=" + su
	}
	return s + " via " + face
}
