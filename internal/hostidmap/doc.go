// Package hostidmap shows a writable host directory to a sandbox whose
// root is the host's root (gVisor's gofer, a rootful engine's container)
// through an idmapped mount, so that what the sandbox writes there lands
// as it does under the native backend: owned by the invoking user (the
// sandbox's root stands for the directory's owner) or by ids of a block
// of host ids of the sandbox's own, never by another host user and never
// by host root.
//
// The mount's user namespace maps, inside to outside (on disk to what
// the sandbox's side sees):
//
//	OwnerUID  0       1
//	Base+1    1       Size-1
//
// so host root writing through the mount creates files of the owner, a
// chown to n (1 ≤ n < Size) gives host id Base+n, and an id the map lacks
// (another host user's files, root's) shows as the overflow id (nobody)
// and cannot be given. The clone is nosuid and nodev. Base is a block of
// package idrange (leased for the sandbox's life), clear of /etc/subuid,
// /etc/subgid and local accounts.
//
// Set-id bits and file capabilities are not a matter of ids: the
// backends refuse them with their seccomp filter (native.SetidGuard).
package hostidmap
