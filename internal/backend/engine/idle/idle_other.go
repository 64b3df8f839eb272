//go:build !linux || !amd64

package idle

// Binary: no build of the idle program for this system.
const Binary = ""
