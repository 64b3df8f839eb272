// Package prestart creates a sandbox's namespaces while agentkernel is
// still starting up.
//
// Every `agentkernel run` pays for the start-up of one Go binary: the
// runtime, then the init of every linked package (the image store's
// registry client and decompressors, the SQLite store, the MCP server),
// then the command line and the configuration. That is work on one
// CPU, all of it before the native backend
// knows what sandbox to build. Creating the namespaces (the network
// namespace above all) is kernel work that needs no
// configuration, so this package does it in parallel: its init, which
// runs early because the package imports almost nothing, starts a
// goroutine that locks an OS thread, unshares the mount, PID, network,
// IPC and UTS namespaces, makes the mount tree private and brings the
// loopback interface up. The native backend's Run then builds the
// sandbox on that thread (Give: the thread goes on with the build as
// soon as it is made, or at once if it waits already; Take, which waits
// for the thread, remains for tests) instead of starting one. While it
// unshares, the thread keeps off the CPU the main thread was on
// (awayFrom): woken there, it used to hold agentkernel's own start-up
// off its CPU meanwhile while another CPU idled.
//
// It only does so for a `run` command line, as root, on the
// architectures where the native backend builds sandboxes on a thread
// (amd64), not when AGENTKERNEL_REEXEC_INIT is set, and not when a running
// daemon will serve the run (its run socket exists in the run's data
// directory and no flag keeps the run from it: daemonServes), since the
// daemon builds that sandbox. It reads the command line itself, before
// the flag parser's package is initialised: its knowledge of run's flags
// (commandline_table.go) is generated from runcli's flag bindings, and
// TestRunFlagsKnownToPrestart in package runcli fails when the two part. A thread nobody takes ends with the
// process: it holds nothing but empty namespaces.
//
// This package keeps one piece of package-level state, the thread it
// started: an init function has nowhere else to put it.
package prestart
