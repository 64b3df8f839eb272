// Package image is agentkernel's image store: it pulls OCI and Docker
// images from any registry, loads `docker save` tarballs and OCI layouts,
// imports plain root filesystem tarballs, unpacks every layer exactly once
// into a content-addressed cache, and hands backends a [Rootfs]: the
// ordered list of read-only layer directories plus the runtime part of the
// image config. Backends stack the layers with overlayfs; nothing is copied
// per sandbox.
//
// # What the package owns
//
// Everything under <data-dir>/images:
//
//	images/
//	  store.json               format version and the IDMap/privilege the layers were unpacked with
//	  index.json               tags -> manifest digests and one record per image (written atomically)
//	  blobs/sha256/<hex>       manifests and image configs, by digest
//	  layers/sha256/<hex>/     one unpacked layer per diff ID, shared by every image that has it
//	      fs/                  the layer's files, in overlayfs form (the lowerdir)
//	      layer.json           what was unpacked: digests, sizes, counts
//	  locks/                   flock files: index.lock, gc.lock, layer-<hex>.lock
//	  tmp/                     layers being unpacked; never mistaken for complete ones
//
// A layer directory appears under layers/ only by rename(2) of a fully
// unpacked, synced temporary directory, so a crash at any point leaves
// nothing that a later pull takes for complete; leftovers in tmp/ are
// removed by the next pull of that layer or by [Store.Prune]. Processes
// coordinate with flock(2): one lock per layer (so two pulls of one image
// download each layer once), one for the index (read-modify-write, then
// rename), and gc.lock (held shared by pulls and loads, exclusively by
// Prune). Readers never lock: index.json is only ever replaced by rename,
// and a cache-hit [Store.Ensure] is one stat of index.json (the parsed
// index is kept in memory while the file's inode is unchanged) plus one
// stat per layer directory.
//
// # Why our own extractor
//
// A layer is untrusted input that is written to the host's disk by a
// process that is usually root. Generic tar extractors (and the ones in
// go-containerregistry and docker's pkg/archive) either follow paths with
// plain open(2), or check names lexically and then race or miss
// symlink-then-write and hardlink tricks. Ours resolves every parent
// directory with openat2(2) and RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS, so
// the kernel confines every lookup to the layer directory (a symlink to
// "/etc" means <layer>/etc), and creates the final component with *at
// calls that never follow it (O_CREAT|O_EXCL|O_NOFOLLOW, mkdirat,
// symlinkat, linkat without AT_SYMLINK_FOLLOW, mknodat). Names that climb
// out with ".." are rejected; absolute names are taken relative to the
// layer root. It also has to do what generic extractors do not: convert
// OCI whiteouts to the overlayfs form, shift ownership for user
// namespaces, and decide which xattrs a hostile image may set.
//
// Whiteouts: ".wh.NAME" becomes a 0/0 character device NAME (creatable
// without privilege since Linux 5.8) unless NAME was created by the same
// layer; ".wh..wh..opq" marks its directory opaque. Opaque directories
// get "user.overlay.opaque=y" always and, when running as root, also
// "trusted.overlay.opaque=y". A rootless store therefore needs overlayfs
// mounted with the "userxattr" option ([Rootfs.UserXattr] says so); a
// root store works with either mount mode.
//
// Ownership: as root, files are chowned to the tar's uid/gid shifted by
// [Options.IDMap] (ids at or above IDMap.Size become the overflow id
// 65534, shifted); rootless, nothing is chowned and every file belongs to
// the caller, which a user namespace then maps to root. The native
// backend's map ([DefaultIDMap]) keeps the image's own ids 0..65535 with
// no shift, as docker's and containerd's stores do: every sandbox sees the
// layers through idmapped mounts that shift them into a block of host ids
// of its own, so the store is tied to no id range. The IDMap is recorded
// in store.json and [Open] refuses a store unpacked with another, except
// one unpacked with the earlier default, which shifted image ids by
// 100000 ([cache.LegacyIDMap]): that store is converted once, in place,
// under gc.lock, keeping set-id bits and file capabilities.
//
// Xattrs: "user.*" is kept (except "user.overlay.*"); "security.capability"
// is kept only as root and rewritten for the shifted root (a v3,
// namespaced capability; with no shift a v2 one, which the kernel maps
// through a sandbox's idmapped mount to that sandbox's root); "trusted.*" (which would let an image forge
// overlayfs metadata), other "security.*" labels and POSIX ACLs (whose ids
// we would have to shift) are dropped and counted.
//
// Device nodes are created only as root (and counted as skipped
// otherwise). Backends must mount image roots with "nodev" or deny
// devices through the cgroup: a hostile image can ship any device node.
// Modes (including setuid bits, applied after chown), and access and
// modification times (on symlinks too) are kept; directory modes and
// times are applied after their contents are written.
//
// Layer directories live under a 0700 directory owned by the store's
// owner; backends must open or mount them with the store owner's
// credentials (for example mount the overlay before entering the
// sandbox's user namespace, or pass file descriptors).
package image
