// Package supervisor owns persistent sandboxes on the host: one detached
// supervisor process per running sandbox (like containerd's shim or
// podman's conmon; no central daemon) and the lifecycle around it.
//
// `agentkernel sandbox start NAME` spawns `agentkernel sandbox supervise
// NAME` in a session of its own with stdio going to
// <data-dir>/sandboxes/<NAME>/supervisor.log. The supervisor boots the
// sandbox with the native backend (native.Backend.Start: the init stays
// PID 1 as the sandbox's agent), binds <data-dir>/sandboxes/<NAME>/sock
// (0600) and hands the listening socket to the init (agent.OpServe),
// which from then on serves clients itself: the agent protocol (package
// agent: SOCK_SEQPACKET, one JSON object per datagram, descriptors
// passed with SCM_RIGHTS), stop and stats included, one hop instead of
// a relay.
//
// The supervisor then only has to outlive the init and clean up after
// it, and a Go process that waits keeps megabytes resident; so it
// becomes the exec stub (native.ExecWaiter, amd64): a two-record script,
// waitid on the init without reaping it, then execveat of agentkernel
// as `sandbox reap NAME PID` (Reap), which collects the init's status,
// records why it ended unless it was asked to stop (exit-reason),
// removes the socket and the cgroup and exits. The process keeps its
// pid and start time through both execs, so supervisor.pid stays true.
// Idle, a sandbox costs its init's memory (about 3.4 MiB resident after
// an idle trim) plus ~12 KiB. Where no stub exists the Go supervisor
// waits instead (AGENTKERNEL_SUPERVISOR_NO_STUB=1 forces that, for
// tests). When the supervisor is killed, the init dies with it
// (Pdeathsig), its PID and mount namespaces and so every mount go with
// it; Manager reconciles the state (running → stopped, with the reason)
// on the next read and GC removes the empty cgroup.
//
// Manager implements sandbox.Lifecycle and Conn implements sandbox.Conn:
// the faces call sandbox.Manager, which calls these. Manager opens the
// state store on first use, so the exec path (socket of a running
// sandbox) never touches SQLite. A supervisor records "PID START" in
// supervisor.pid once it serves; a starter killed before it could record
// the supervisor leaves it running, and the next read or start adopts it.
//
// State lives in package store (SQLite). The supervisor never opens it:
// it gets its spec from spec.json in its directory, which keeps it small
// and keeps SQLite's writers to the short-lived CLI processes.
//
// Directory of a sandbox: <data-dir>/sandboxes/<NAME>/
//
//	spec.json        the resolved sandbox.Spec (root filesystem included)
//	upper/, work/    the overlay's writable layer: survives stop/start
//	sock             the supervisor's socket while it runs
//	supervisor.log   the supervisor's and init's diagnostics
//	exit-reason      why the sandbox last stopped on its own
//	lock             flock'ed during start/stop/remove
//	supervisor.pid   "PID START" of the running supervisor (adoption)
//	activity         its mtime is the last exec
package supervisor
