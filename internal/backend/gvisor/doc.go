// Package gvisor is the gvisor backend (run -B gvisor): the command runs
// under gVisor's runsc, so that the kernel it talks to is gVisor's
// user-space kernel (the Sentry) rather than the host's, on the systrap
// platform (seccomp traps; no KVM or ptrace needed).
//
// # Design
//
// runsc is an OCI runtime, so a run is an OCI bundle and one `runsc run`:
//
//   - Each run has a private directory under the data directory
//     (<data-dir>/gvisor/agentkernel-*) with runsc's own state directory
//     (--root) in it, so that nothing of one run can be seen or reused by
//     another, and removing the directory removes the run's every trace.
//     The bundle itself (config.json, the rootfs mount point) is in a
//     tmpfs mounted on the directory's scratch/ in the run's own mount
//     namespace, so it goes with that namespace and the host never sees
//     it (a persistent sandbox's bundle is in its directory). Where that
//     tmpfs cannot hold the overlay's extended attributes (a kernel
//     without tmpfs xattrs; one setxattr on it tells) or the overlay
//     refuses it, the run keeps them in its directory on disk instead.
//   - The root filesystem is the image store's layers under an overlay
//     whose upper layer is in that scratch tmpfs (a persistent sandbox's
//     in its directory, kept), mounted on the bundle's rootfs, so that
//     the store's layers are never written. A run's overlays are mounted
//     volatile: their upper layers are discarded unread, and unmounting
//     them then does not sync the data directory's file system. The sandbox's
//     own writes do not even reach that upper layer: they go to gVisor's
//     overlay inside the sandbox (--overlay2=root:dir=...), backed by a
//     file in the run's directory and sized by the profile's disk limit;
//     the host-side upper layer takes only what runsc's gofer makes there
//     (mount points of volumes). A read-only root (restrictive) gets no
//     gVisor overlay and a tmpfs /tmp, as native gives it. Copy-on-write
//     volumes (moderate's /workspace) are host overlays whose upper
//     layer is in the run's directory, bound into the bundle. A writable
//     bind is bound from an idmapped clone of its source in the run's
//     directory (idmap_linux.go, package hostidmap): the gofer writes as
//     host root, which the clone turns into the invoking user, and other
//     ids into a block of host ids leased for the run (a persistent
//     sandbox's: reserved from its first boot to its removal, as
//     native's, native.PersistentIDs). A sandbox with a
//     writable or copy-on-write volume gets native's set-id guard as the
//     spec's seccomp filter, which the Sentry loads (--oci-seccomp).
//   - Those mounts are made in a mount namespace of the run's own: a
//     locked OS thread unshares it, mounts, and starts runsc from that
//     thread, so that runsc, its gofer and its sandbox inherit it. The
//     host's mount table never holds them (nor the network namespace
//     runsc binds into its state directory for --network=none), and they
//     go away with the last of those processes, even when agentkernel is
//     killed: nothing needs unmounting.
//   - config.json is built from the resolved spec: args (else the
//     image's entrypoint and cmd), the image's environment under the
//     spec's, working directory, user (resolved against the image's
//     /etc/passwd and /etc/group as native resolves it:
//     native.ResolveUser), host name, the profile's capabilities (bounding
//     set; effective and permitted for root only, as setuid leaves them),
//     no_new_privs, the open-files limit, a read-only root, the spec's
//     mounts, and memory and process limits as cgroup resources (runsc
//     creates the cgroup below agentkernel's own, and removes it; on a
//     cgroup v1 host a run makes them itself and runs runsc inside them
//     with --ignore-cgroups: owncgroup_linux.go says why). The CPU
//     quota is written into that cgroup by a createRuntime hook, after
//     gVisor's boot and before the command starts, so that the boot
//     does not run under it (cpuquota_linux.go).
//   - AGENTKERNEL_TRACE_STAGES=1 writes the run's stages to stderr
//     (trace_linux.go; bench/cmd/stagetrace reads them).
//   - A sandbox with network egress or published ports gets native's
//     network (network_linux.go): a network namespace of the run's own
//     with the TUN device eth0, whose other end is the network helper
//     (netproc: netstack and netpolicy, the same policy as native's),
//     and runsc with --network=sandbox in it, so that gVisor's stack
//     sends and receives the sandbox's packets on eth0; resolv.conf
//     names the helper's resolver. Without egress, --network=none: the
//     sandbox has gVisor's loopback only.
//   - runsc is executed directly rather than through
//     github.com/containerd/go-runc: a run needs one `runsc run` started
//     on the thread that owns the mount namespace, with the caller's
//     descriptors as its stdio, its error log on a descriptor of our own
//     (--log-fd, to tell runsc's failures from the command's status) and
//     `runsc kill` and `delete --force` for the ends; go-runc adds a
//     dependency for those four argument lists and hides the *exec.Cmd
//     the thread must start.
//   - With -t, runsc opens the command's pseudo-terminal and hands its
//     master over a console socket in the run's directory
//     (--console-socket); the run bridges it to its stdin and stdout, the
//     caller's terminal in raw mode meanwhile, and follows its size.
//   - Otherwise the caller's stdin, stdout and stderr go to runsc as they are, but
//     for regular files: gVisor reads and writes those at offsets of its
//     own, from the start, so a run's output would overwrite a log it is
//     appended to; they reach runsc as pipes that agentkernel copies.
//   - The command's exit status is runsc's (128+N for signal N); runsc's
//     own failures (status 128 with an error logged) become errors, the
//     command not found or not executable (looked up in the image first,
//     and in runsc's error) sandbox.ErrNotFound and ErrCannotInvoke.
//     Signals the run receives reach the command through `runsc kill`
//     (SIGINT and SIGQUIT to every process of the sandbox, as a terminal
//     sends them to the foreground job; a command still running 3 s after
//     SIGINT, SIGTERM or SIGHUP, or at a second one, is killed); a
//     cancelled context, and --timeout, kill the sandbox, and
//     `runsc delete --force` removes whatever runsc left.
//   - A run holds a lock on its directory (flock) while it lives. When
//     agentkernel is killed, runsc's sandbox runs on and the directory
//     stays (the mounts go with runsc's processes): GC, which `agentkernel
//     gc` calls, finds the directories whose lock is free, deletes their
//     container (ending the sandbox) and removes them.
//
// runsc is found through AGENTKERNEL_RUNSC, then where scripts/runsc.sh
// builds it (RunscCachePath), then PATH. The version pinned in
// RunscVersion is the gVisor module version go.mod already requires for
// the network stack; distributions' runsc packages are often too old for
// systrap and are refused with a note saying how to build a current one.
//
// # Detached commands and memory snapshots
//
// A running persistent sandbox is held still for a snapshot's copy of
// its writable layers by `runsc pause` (sandbox.Freezer, freeze_linux.go;
// runsc's state is found through the sandbox's directory), and `runsc
// resume` lets it run on. What runsc's checkpoint and restore keep
// (TestCheckpointRestoreKeeps, with the runsc RunscVersion pins):
//
//   - `runsc checkpoint` works on this layout (systrap, --overlay2=none,
//     --file-access=shared, --network=sandbox too), in about 0.1-0.35 s
//     for a sandbox of a few shell processes (an image of about 1 MB; 100
//     MB of tmpfs: 0.2 s and 102 MB), and with --leave-running the
//     sandbox runs on with its commands.
//   - `runsc restore` kills every thread group whose task was made by
//     `runsc exec` (runsc/boot/restore.go, Loader's restore: "Kill all
//     processes that have been exec'd", keyed on kernel.OriginExec, which
//     pkg/sentry/control/proc.go sets on an exec's first task), and a
//     task's origin is passed to every task it clones
//     (pkg/sentry/kernel/task_clone.go, Origin: t.Origin). So a command
//     daemonized from an exec (setsid and a double fork, re-parented to
//     PID 1, stdio on files inside) dies at restore too.
//   - What comes back, with its memory, is a container's own processes:
//     its first process and what that forks, including the first
//     processes of further containers of the same sandbox (runsc create
//     and start with the sandbox-id annotations, over the same root),
//     each restored with its own `runsc restore` after the sandbox's.
//     Restore reopens the root by path and needs the same files, not the
//     same bundle directory (0.3-1 s here); containers of other ids are
//     restored where their names (the CRI name annotation) are the
//     checkpoint's, and runsc checks that each container's process (args,
//     user, working directory, capabilities) and mounts (but for their
//     sources) are the checkpoint's. Blocking system calls that were in
//     progress return EINTR at restore.
//   - A sandbox held still by `runsc pause` is checkpointed with
//     --leave-running and stays paused (0.3-0.6 s), so files and memory
//     are taken in the one freeze.
//   - runsc writes the image's files with mode 0644: they are kept in a
//     directory only root can enter.
//
// So detached commands (`exec --detach`) are containers of the sandbox
// (detached_linux.go: their own bundle over the sandbox's root and
// mounts, in its PID namespace, named by their id, made with runsc
// create and start from the boot's thread, which owns the mount
// namespace the gofer must see; waited for, signalled and deleted
// through runsc wait, kill and delete of that container), while
// foreground commands stay `runsc exec`s (their callers cannot come
// back). The persistent sandbox's own container is named "sandbox".
//
// A memory snapshot (sandbox.Checkpointer, checkpoint_linux.go; the
// supervisor calls it inside the files' freeze) is `runsc checkpoint
// --leave-running` of the sandbox, each detached container's process
// kept beside the image (containers/<ID>.json) and, by the supervisor,
// its record (detached/). A restore of the snapshot leaves them in the
// new sandbox's directory (sandbox.MemoryDir); its first boot moves them
// into its runtime directory (so that every later boot is cold), runs
// `runsc restore` of the bundle instead of `runsc run`, restores each
// detached container over a bundle made from the new sandbox's own
// config.json and the kept process, with pipes for its output, and hands
// them to the agent (agent.DetachedRestorer), which lists them as
// running and copies their output on into their records. A failed
// restore fails the boot (the image is gone: the next is cold). A
// sandbox with a network keeps it: the restored sandbox's boot makes its
// own network helper and device, as every boot does, and gVisor's stack
// (addresses, listening sockets, the processes serving them) comes back
// over them; connections to the world open at the take do not (the
// helper that carried them is not in the image). A sandbox with secrets
// is refused one: a restored sandbox has a CA of its own, which the
// processes that come back, having read the old one, would not trust.
//
// This backend runs as root only. Persistent sandboxes (Boot,
// persist_linux.go) and warm pools exist on amd64 only (the idle init is
// amd64 code). Secrets are native's (secrets_linux.go): -S bindings of
// runs and of persistent sandboxes (the values resolved by the
// supervisor at each boot) injected by the network helper, the CA in the
// trust store, the placeholders in the command's (and every exec's)
// environment; a run's --secret-file files on a tmpfs of the run's own,
// bound read-only. It has no memory snapshots of sandboxes with secrets
// (above), --keep of a run's writable layer or host image yet; a sandbox's network needs a TUN
// device (no proxy mode as native's). Inside, gVisor's Sentry is the kernel: the profile's
// seccomp filter and Landlock rules, which fence a host kernel, are not
// loaded there (the Sentry runs under gVisor's own seccomp filter on the
// host).
package gvisor
