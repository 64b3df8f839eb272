//go:build linux

package image

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncTree makes a freshly unpacked layer durable before it is renamed
// into place: one syncfs(2) of the filesystem holding dir instead of an
// fsync per file.
func syncTree(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
