package policy

import (
	"crypto/rand"

	"golang.org/x/sys/unix"
)

// randomBytes fills b from the kernel's CSPRNG with one getrandom(2):
// crypto/rand's first call in a process sets up the vDSO generator's
// state and a timer, which every short-lived CLI run would pay for six
// bytes.
func randomBytes(b []byte) {
	for {
		n, err := unix.Getrandom(b, 0)
		if err == unix.EINTR {
			continue
		}
		if err == nil && n == len(b) {
			return
		}
		break
	}
	rand.Read(b) // never fails since Go 1.24: it crashes the program instead
}
