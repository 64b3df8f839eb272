// Package supervisor owns persistent sandboxes on the host: one detached
// supervisor process per running sandbox (like containerd's shim or
// podman's conmon; no central daemon) and the lifecycle around it.
//
// `agentkernel sandbox start NAME` spawns `agentkernel sandbox supervise
// NAME` in a session of its own with stdio going to
// <data-dir>/sandboxes/<NAME>/supervisor.log. The supervisor boots the
// sandbox through the backend the face wired in (Serve takes a
// sandbox.Booter: the native backend, whose sandbox's PID 1 is then an
// idle stub with no privilege at all), binds
// <data-dir>/sandboxes/<NAME>/sock (0600) and serves the agent protocol
// there itself (agent.Server over the booted sandbox.Instance, which is
// an agent.Sandbox: package agent, SOCK_SEQPACKET, one JSON object per
// datagram, descriptors passed with SCM_RIGHTS): exec, files, stats and
// stop, each done from outside the sandbox, as runc exec does. Nothing
// of agentkernel with a privilege lives in the sandbox's PID namespace.
//
// This package imports no backend: what it needs of one is declared in
// package sandbox (Booter, Instance, Reclaimer, Meter) and wired in by
// the face (package cli); TestNoBackendImports keeps it so.
//
// When PID 1 ends (a stop, or killed), the supervisor records why unless
// it was asked to stop (exit-reason), removes the socket and the cgroup
// and exits. Idle, it trims its own memory (package idletrim), so a
// sandbox costs its Go process after the trim plus PID 1's few KiB. When
// the supervisor is killed, PID 1 dies with it (Pdeathsig, and its wait
// on the config socket), its PID and mount namespaces and so every
// mount go with it; Manager reconciles the state (running → stopped,
// with the reason) on the next read and GC removes the empty cgroup and
// frees the sandbox's host ids once it is removed.
//
// Manager implements sandbox.Store, sandbox.Supervisor, sandbox.Connector
// and sandbox.HostStats, and Conn implements sandbox.Conn: the faces call
// sandbox.Manager, which calls these. Manager frees a removed or dead
// sandbox's host resources (cgroups, host ids) and reads its cgroup's
// figures through the backend's sandbox.Reclaimer and sandbox.Meter.
// Manager opens the state store on first use, so the exec path (socket
// of a running sandbox) never touches SQLite. A supervisor records
// "PID START" in supervisor.pid once it serves; a starter killed before
// it could record the supervisor leaves it running, and the next read or
// start adopts it.
//
// A sandbox's TTL is kept on time by its supervisor (ttl_linux.go): the
// expiry is in its directory, watched with inotify, and once it has
// passed the supervisor calls Serve's WithExpiry (the CLI's: a detached
// `sandbox expire NAME`, which stops and removes it through the state
// store). A stopped sandbox that has expired is removed by the next
// List or Start, and by GC. The configuration's [[files]] (files.json)
// are copied in by Start once the supervisor serves, through its socket
// as cp does.
//
// State lives in package store (SQLite). The supervisor never opens it:
// it gets its spec from spec.json in its directory, which keeps it small
// and keeps SQLite's writers to the short-lived CLI processes.
//
// Directory of a sandbox: <data-dir>/sandboxes/<NAME>/
//
//	spec.json        the resolved sandbox.Spec (root filesystem included)
//	upper/, work/    the overlay's writable layer: survives stop/start
//	cow<i>/upper/, cow<i>/work/  the writable layer of copy-on-write
//	                 volume i (the project at /workspace, profile
//	                 moderate): survives stop/start too
//	expires          the expiry (RFC 3339) while the sandbox has one
//	files.json       host files copied in at each start ([[files]])
//	sock             the supervisor's socket while it runs
//	supervisor.log   the supervisor's and init's diagnostics
//	exit-reason      why the sandbox last stopped on its own
//	lock             flock'ed during start/stop/remove
//	supervisor.lock  flock'ed by the supervisor from before its boot to
//	                 its end (a start waits for one that boots)
//	frozen, freeze.lock  a snapshot's freeze of the running sandbox
//	                 (freezeguard_linux.go)
//	supervisor.pid   "PID START" of the running supervisor (adoption)
//	activity         its mtime is the last exec
//	net-proxy        present while it runs in proxy mode (no TUN device:
//	                 no address of its own)
package supervisor
