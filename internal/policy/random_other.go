//go:build !linux

package policy

import "crypto/rand"

// randomBytes fills b from the system's CSPRNG.
func randomBytes(b []byte) {
	rand.Read(b) // never fails since Go 1.24: it crashes the program instead
}
