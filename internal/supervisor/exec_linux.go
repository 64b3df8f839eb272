package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/audit"
)

// wireExec gives the sandbox's agent server what exec needs beyond one
// client's command: detached commands kept under dir/detached, and the
// audit log (<data-dir>/audit.jsonl, dir being
// <data-dir>/sandboxes/NAME) for the ends no client saw: a detached
// command's, and a foreground command's whose client went away (the
// server killed it).
func wireExec(srv *agent.Server, dir string) {
	if err := srv.ServeDetached(filepath.Join(dir, "detached")); err != nil {
		fmt.Fprintf(os.Stderr, "agentkernel: detached commands: %v\n", err)
	}
	log := audit.New(filepath.Dir(filepath.Dir(dir)))
	name := filepath.Base(dir)
	srv.Audit = func(e agent.ExecEnd) {
		code := e.ExitCode
		entry := audit.Entry{Time: time.Now().Add(-e.Duration).UTC(), Sandbox: name, Action: audit.ActionExec, Command: e.Args,
			ExitCode: &code, DurationMS: float64(e.Duration.Microseconds()) / 1000, Who: "supervisor", Details: e.Reason}
		if e.Reason == "client gone" {
			entry.Details = "client gone: the command was killed"
		}
		if err := log.Append(entry); err != nil {
			fmt.Fprintf(os.Stderr, "agentkernel: audit log: %v\n", err)
		}
	}
}
