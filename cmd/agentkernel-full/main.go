// Command agentkernel-full is agentkernel's whole command line: every
// command, the sandbox init, the supervisor, the daemon, the API server
// and the MCP server. Users type 'agentkernel', which runs cached images
// itself and hands every other command line to this binary, installed
// beside it (see cmd/agentkernel).
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
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/cli"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/kubeegress"
	"github.com/agentkernel/agentkernel/internal/kubeegress/proxy"
	"github.com/agentkernel/agentkernel/internal/netproc"
	"github.com/agentkernel/agentkernel/internal/netproc/helper"
	"github.com/agentkernel/agentkernel/internal/nomadcli"
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
	// A sandbox's network helper serves its network and nothing else.
	if len(os.Args) > 0 && os.Args[0] == netproc.Argv0 {
		return helper.Main(native.ConfineProcess)
	}
	// A Kubernetes sandbox's egress proxy and its rules, in its pod.
	if len(os.Args) > 1 && os.Args[1] == kubeegress.Command {
		return proxy.Main(os.Args[2:], os.Stdout, os.Stderr)
	}
	// A sandbox's supervisor lives as long as its sandbox: it skips the
	// command line's set-up (and the memory that would stay with it).
	if len(os.Args) > 0 && os.Args[0] == cli.SuperviseArgv0 {
		return cli.SuperviseMain(os.Args[1:])
	}
	// -B kubernetes is served by agentkernel-kube (client-go stays out of
	// this binary, which every supervisor and network helper runs).
	if fullbin.WantsKube(os.Args[1:]) {
		return kubeHandOff()
	}
	// -B nomad: its own command line, over Nomad's (light) API client.
	if fullbin.WantsNomad(os.Args[1:]) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return nomadcli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	}
	if commit == "unknown" {
		commit = runcli.Revision()
	}
	app := cli.NewApp(runcli.App{
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Version: cli.VersionInfo{Version: version, Commit: commit, Go: runtime.Version()},
	})
	return runcli.ExitCode(cli.NewRootCommandFor(app, os.Args).Execute(), os.Stderr)
}
