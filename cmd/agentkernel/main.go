// Command agentkernel is the single binary of agentkernel: CLI, sandbox
// init, supervisor, daemon, API server and MCP server.
//
// GOMAXPROCS is the number of CPUs this process may run on, not derived
// from the cgroup's CPU quota (Go 1.25's default, off here): the runtime
// would keep two cgroup files open for the whole life of every process
// and re-read them every second. agentkernel's processes hand exact
// descriptor numbers to their children (the sandbox init, the stub, the
// waiting supervisor) and close unknown ones, and an idle supervisor or
// init must not wake up for nothing. Set GOMAXPROCS to limit it.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/cli"
)

// Set with -ldflags "-X main.version=… -X main.commit=…".
var (
	version = "0.1.0-dev"
	commit  = "unknown"
)

func main() {
	os.Exit(run())
}

func run() int {
	// The sandbox init and exec stages are this binary re-executed; they
	// must not touch the CLI.
	if native.IsInit() {
		return native.InitMain()
	}
	if commit == "unknown" {
		commit = vcsRevision()
	}
	app := &cli.App{
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Version: cli.VersionInfo{Version: version, Commit: commit, Go: runtime.Version()},
	}
	root := cli.NewRootCommandFor(app, os.Args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ee *cli.ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(os.Stderr, "agentkernel: %v\n", ee.Err)
			if ee.Hint != "" {
				fmt.Fprintf(os.Stderr, "hint: %s\n", ee.Hint)
			}
		}
		return ee.Code
	}
	fmt.Fprintf(os.Stderr, "agentkernel: %v\n", err)
	return cli.ExitAgentkernel
}

// vcsRevision is the commit the binary was built from, when the Go
// toolchain recorded it.
func vcsRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
