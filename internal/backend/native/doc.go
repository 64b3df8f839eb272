// Package native is agentkernel's embedded Linux backend: it runs a
// command in a sandbox made of Linux namespaces, an overlayfs root, cgroup
// limits, dropped capabilities, no_new_privs, Landlock and seccomp, with
// no daemon and no external runtime. The agentkernel binary itself is the
// sandbox's init: /proc/self/exe re-executed in a hidden mode chosen by
// argv[0] ("agentkernel:init", "agentkernel:exec"); main calls IsInit and
// InitMain before anything else.
//
// STATUS: vertical slice done and tested (root caller, busybox image,
// overlay root, /proc /dev /sys, nested user namespace, exit codes,
// cleanup); cgroups v1, seccomp (default / no-ptrace / allowlist),
// capabilities, Landlock, tty, timeouts, signals, host image, keep, GC in
// place. See the report at the end of this comment for what is left.
//
// # Three processes, three stages
//
// A run involves three processes, each a stage with one job:
//
//  1. The parent (Backend.Run, run_linux.go) is agentkernel itself. It
//     turns the Spec into an initConfig, creates the cgroup only when a
//     limit is set (lazily: no limits, no cgroup work), queues the config
//     on a SOCK_SEQPACKET pair *before* starting the init (no round trip),
//     and clones the init with Go's SysProcAttr into new mount, PID,
//     network, IPC and UTS namespaces, Pdeathsig=SIGKILL and a session of
//     its own. It then waits: forwarding signals, enforcing the timeout
//     (SIGKILL to the init ends the PID namespace, the cgroup is the
//     second fence), reading error reports on fd 4 and the command's wait
//     status on fd 3.
//
//  2. The init (initMain, init_linux.go) is PID 1 of the sandbox. When
//     agentkernel runs as root the init is host root in namespaces owned
//     by the host user namespace: that is what lets it mount an overlay of
//     layer directories under a 0700 data dir, mknod the six devices and
//     build everything the sandbox can then not undo. Its stages, in
//     order, each a named method:
//     readConfig → joinCgroups → mountFreshProc → startExecStage →
//     setupNetwork → prepareScratch → mountRootfs → moveProc → mountDev →
//     mountSys → mountTmp → mountVolumes → prepareProcess → pivotRoot →
//     releaseExecStage → supervise.
//     Why this order: the cgroup is joined first so that every later
//     process is accounted. A fresh proc is mounted before the exec stage
//     is forked because Go writes /proc/<pid>/uid_map and <pid> must be a
//     pid of the new namespace; the same proc mount is later moved (not
//     re-mounted) into the new root. The exec stage is forked as early as
//     possible so its Go runtime boots while the init mounts (the two run
//     in parallel on two cores). The per-run tmpfs ("scratch", sized by
//     DiskMB) covers a host directory that holds no layer, only in the
//     init's private mount namespace, and holds the overlay's upper and
//     work dirs and the new root's mount point. pivot_root into the new
//     root and MNT_DETACH of the old one leave no host path nameable.
//     supervise reaps every child and exits with the command's status as
//     soon as the command ends; PID 1 exiting makes the kernel kill the
//     rest of the PID namespace, so `sh -c 'sleep 100 & exit 0'` returns
//     at once and leaves nothing behind.
//
//  3. The exec stage (execMain / fence, exec_linux.go) becomes the
//     command. For a root caller it lives in a user namespace of its own
//     that maps 0..65535 to host 100000..165535 (the range the image store
//     shifts layer ownership into) and that owns *none* of the sandbox's
//     other namespaces: root inside cannot mount, configure the network,
//     set the hostname or remount /proc/sys, whatever capabilities it
//     keeps. It waits for the init's go (its config on a pipe), then on
//     one locked thread: drops the bounding set to Spec.Security
//     .Capabilities, clears ambient and inheritable capabilities, sets
//     groups/gid/uid, chdirs, sets RLIMIT_NOFILE, sets no_new_privs,
//     applies Landlock, loads the seccomp filter and execs. Everything is
//     per-thread and only this thread survives execve, so no TSYNC is
//     needed. A failing execve is reported on fd 4 (close-on-exec: a
//     successful exec closes it silently) as "exec <errno> <message>",
//     which the parent maps to sandbox.ErrNotFound (ENOENT, 127) or
//     sandbox.ErrCannotInvoke (EACCES/ENOEXEC..., 126).
//
// Why a separate exec stage rather than exec'ing from the init: entering
// a new user namespace resets the capability sets to full, and Go's
// fork/exec can neither drop the bounding set nor install seccomp or
// Landlock between clone and execve. The extra Go start costs about as
// much as the init's mount work, and the two overlap.
//
// # Rootless
//
// A non-root caller cannot create namespaces owned by the host user
// namespace, so the init itself is cloned with CLONE_NEWUSER as well,
// mapping the caller's uid/gid to 0 (one id), and does its mounts inside
// that namespace (overlay with userxattr, binds of /dev nodes instead of
// mknod). The exec stage then gets no further user namespace. Images with
// files owned by several uids need newuidmap ranges, which are not used
// yet (see below). Cgroup limits need a delegated cgroup; without one the
// run goes on without limits after one warning.
//
// # Root filesystem
//
// Image layers (lowest first in Rootfs.Layers) become overlay lower dirs,
// top first; the upper dir's owner and mode are copied from the top
// layer's root so "/" looks like the image's. The "host" image is a
// bind of a scratch directory holding read-only, nosuid binds of the
// host's /usr, /bin, /sbin, /lib* and /etc (symlinks recreated), with
// /etc/shadow, /etc/gshadow, /etc/sudoers*, /etc/ssh masked. /proc is
// fresh, with runc's masked and read-only paths; /dev is a tmpfs with
// null, zero, full, random, urandom, tty, a private devpts (ptmx 0666),
// /dev/shm and the fd links; /sys is read-only; /tmp and /run are tmpfs
// owned by the sandbox's root. Mount destinations are resolved inside the
// new root (resolveIn), so an image's symlinks cannot point a mount
// outside it. ReadOnlyRoot sets MOUNT_ATTR_RDONLY on "/" after every mount
// point exists.
//
// # Workspace ownership (idmapped mounts)
//
// Host directories bound or overlaid into a root caller's sandbox are
// idmapped (open_tree + mount_setattr(MOUNT_ATTR_IDMAP)) through the
// command's own user namespace, so a file the host sees as uid N appears
// as N inside: the project's owner and root look like themselves and the
// sandbox's root can write a copy-on-write workspace. For copy-on-write
// mounts this is harmless: writes land on the tmpfs upper. For writable
// binds it means the sandbox's root writes files the host sees as owned
// by host root — the same as docker with a bind mount, but we fence it:
// every bind is nosuid and nodev inside, and when a writable idmapped
// bind exists the seccomp filter also refuses chmod/fchmod/fchmodat(2),
// open/openat/creat/mknod(at) with S_ISUID or S_ISGID, openat2 (ENOSYS,
// libc falls back to openat) and the setxattr family (file
// capabilities), so no setuid binary or file capability can be planted
// for the host to run. Read-only binds are idmapped too.
//
// # Cgroups
//
// github.com/opencontainers/cgroups' fs (v1) and fs2 (v2) managers are
// used with explicit paths, only for the memory, pids and cpu controllers
// (its default v1 path would create a cgroup in all fifteen hierarchies).
// Memory and memory+swap get the same limit: no swap. v1 cgroups live in
// <own cgroup>/agentkernel/agentkernel-<id> for each controller; v2 in
// /sys/fs/cgroup/agentkernel/agentkernel-<id> for root, next to the
// caller's own cgroup when rootless and delegated. The init joins by
// writing 0 to cgroup.procs before it forks anything. The cgroup is
// removed after the run; the PID namespace is already dead by then.
//
// # Cleanup and GC
//
// Nothing of an ephemeral run lives in the host's mount namespace: the
// scratch tmpfs, the overlay and every mount die with the init's mount
// namespace. Only --keep (upper dir under DataDir/runs/<id>) and cgroups
// exist outside; a run directory carries a "lock" file flock'ed by the
// owning agentkernel (a lock GC can take means the owner died) and a
// "kept" marker after a kept run. GC removes dead, unkept run dirs, empty
// agentkernel-* cgroups older than 30 s and stray mounts under DataDir/runs.
//
// # What is left
//
//   - Rootless runs map one uid; newuidmap/newgidmap with /etc/subuid
//     ranges are not used yet, so multi-uid images show unmapped files.
//   - The tty's pty comes from the host's devpts (the command's ttyname
//     fails; isatty and the window size work).
//   - DiskMB is not enforced for --keep (the upper dir is on disk).
//   - With a writable root, Landlock grants write on every top-level
//     directory but /proc, /sys and /dev; new top-level entries cannot be
//     created while Landlock is on.
package native
