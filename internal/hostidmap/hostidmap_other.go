//go:build !linux

package hostidmap

import "errors"

// Owner is whom a mount's writes are for (Linux only).
type Owner struct {
	UID, GID int
	Base     uint32
}

var errLinux = errors.New("idmapped mounts are Linux's")

// Mount is Linux's.
func Mount(src, dst string, o Owner) error { return errLinux }

// MountPoint is Linux's.
func MountPoint(src, dst string) error { return errLinux }

// MountIn is Linux's.
func MountIn(pid int, o Owner, srcs, dsts []string) (func() error, error) { return nil, errLinux }

// MountsUnder is Linux's.
func MountsUnder(pid int, dir string) ([]string, error) { return nil, errLinux }

// UnmountIn is Linux's.
func UnmountIn(pid int, points []string) error { return errLinux }
