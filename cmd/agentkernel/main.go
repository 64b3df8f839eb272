// Command agentkernel is what users type. It runs 'agentkernel run' of
// images that are already cached, on the native backend or on gvisor
// (-B gvisor), 'exec', 'attach' and 'cp' into a running persistent
// sandbox and 'stats' of running ones by itself, and hands every other
// command line to agentkernel-full, the binary with the rest of the
// command line (images, sandboxes, the daemon, the API and MCP servers,
// the other backends), which it finds beside itself.
//
// Why two binaries: a Go program initialises every package it links
// before main runs, on every start. 'run' is the command agents call in
// a loop (and 'exec' into a sandbox they keep), and its start-up should
// not pay for a registry client, TLS, an SQLite engine and an MCP server
// it does not use; linking only what a run of a cached image (or an exec
// or stats over a sandbox's socket) needs takes milliseconds off every
// one. The hand-off is one execve(2) with the same arguments,
// environment and descriptors, made before this process has printed or
// started anything, so agentkernel-full behaves exactly as if it had
// been called directly. TestRunPathDependencies keeps the heavy packages
// out of this binary.
//
// Why gvisor here: its backend links none of gVisor, it only executes
// runsc (and adds no package to this binary but itself and
// internal/backend/bootprep), while handing its runs over would start a
// second Go binary, agentkernel-full, for each of them. A run on any
// other backend (docker, podman, auto, ...) is agentkernel-full's:
// runcli answers ErrNeedsFull for it (App.PartialBackends).
//
// GOMAXPROCS is the number of CPUs this process may run on, not derived
// from the cgroup's CPU quota (Go 1.25's default, off here): see
// cmd/agentkernel-full.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/backend/native/prestart"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func main() {
	os.Exit(run())
}

func run() int {
	runcli.TraceStage("main")
	// The sandbox init (rootless runs) is this binary re-executed.
	if native.IsInit() {
		return native.InitMain()
	}
	app := &runcli.App{
		Stdin:  os.Stdin,
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		// Until the command is known to be ours, warnings wait: one
		// handed to agentkernel-full prints its own.
		HoldWarnings: true,
		// Of the backends besides native, only gvisor (see above).
		PartialBackends: true,
	}
	app.MoreBackends = func() []sandbox.Backend {
		return []sandbox.Backend{gvisor.New(gvisor.Options{DataDir: app.DataDir, Warn: func(s string) { app.Warnf("%s", s) }})}
	}
	if fullbin.WantsKube(os.Args[1:]) || fullbin.WantsNomad(os.Args[1:]) {
		// -B kubernetes or nomad: flags of their own, which this binary
		// does not parse (agentkernel-full serves them or hands them on).
		return handOff()
	}
	if !prestart.IsRun(os.Args) {
		// exec, attach and cp into a running sandbox, and stats of
		// running ones, are this binary's too; the rest, and whatever
		// of those it cannot serve, is agentkernel-full's.
		err := app.ExecuteSandboxCommand(os.Args[1:])
		if errors.Is(err, runcli.ErrNeedsFull) {
			app.DropWarnings()
			return handOff()
		}
		app.FlushWarnings()
		return runcli.ExitCode(err, os.Stderr)
	}
	// No version information: nothing this binary serves prints it
	// (version and --version are agentkernel-full's), and reading the
	// build's VCS stamp would cost every run.
	err := app.Execute(os.Args[1:])
	if errors.Is(err, runcli.ErrNeedsFull) {
		app.DropWarnings()
		if errors.Is(err, runcli.ErrRunHelp) {
			if _, ferr := fullbin.Path(); ferr != nil {
				app.PrintRunHelp(os.Stdout) // the same help agentkernel-full prints
				return 0
			}
		}
		return handOff()
	}
	app.FlushWarnings()
	return runcli.ExitCode(err, os.Stderr)
}

// handOff replaces this process with agentkernel-full, same arguments,
// environment and descriptors. It returns only when that fails.
func handOff() int {
	prestart.Abandon()
	full, err := fullbin.Path()
	if err == nil && isSelf(full) {
		// A copy of this binary installed as agentkernel-full would hand
		// the command line to itself for ever.
		err = fmt.Errorf("%s is a copy of the agentkernel binary, not agentkernel-full", full)
	}
	if err == nil {
		err = syscall.Exec(full, os.Args, os.Environ())
		err = fmt.Errorf("starting %s: %w", full, err)
	}
	return runcli.ExitCode(&runcli.ExitError{Code: runcli.ExitAgentkernel, Err: err,
		Hint: "agentkernel-full is built with agentkernel: go build -o bin/ ./cmd/..."}, os.Stderr)
}

// isSelf reports whether path is the file this process runs.
func isSelf(path string) bool {
	var a, b syscall.Stat_t
	return syscall.Stat(path, &a) == nil && syscall.Stat("/proc/self/exe", &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino
}
