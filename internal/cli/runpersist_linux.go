package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// runPersistent is runcli.App.RunPersistent here: a run with --name, -d
// or --branch. Its spec is resolved as a run's (the command picks the
// image), recorded as a persistent sandbox and started; the command then
// runs in it as 'exec -i' would, with run's terminal (-t) and stdin, and
// the sandbox keeps running afterwards. --branch reuses the sandbox of its
// name when it exists (its spec as it was made). -d prints the name
// instead of running anything. --keep is the same with a random name
// (unless --name) and an expiry (1h unless --ttl): the name is printed
// on stderr once the command is done, even with --quiet, since it is
// the only way to the sandbox.
func (a *App) runPersistent(ctx context.Context, r runcli.PersistentRun) error {
	if err := a.SetupLogging(); err != nil {
		return err
	}
	dir, err := os.Getwd()
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	name, err := newSandboxName(dir, r.Name, r.Branch)
	if err != nil {
		return err
	}
	ov := r.Overrides
	ov.Name = name
	if ov.Set == nil {
		ov.Set = map[string]bool{}
	}
	ov.Set["name"] = true
	tty := ov.TTY
	spec, err := a.ResolveRunSpecFor(ov, r.Args, r.Backend)
	if err != nil {
		return err
	}
	if r.Resolved != nil {
		r.Resolved(spec)
	}
	// The sandbox idles; the command runs in it by exec.
	spec.Args = nil
	// The configuration's [[files]], copied in at each start (its
	// warnings were given as the spec was resolved).
	cfg, _, err := config.Load(a.LoadOptions(dir))
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	files, err := configFiles(cfg, dir)
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	m, done, err := a.sandboxes()
	if err != nil {
		return err
	}
	defer done()
	_, created, err := m.Create(ctx, sandbox.CreateRequest{Name: name, Spec: spec, TTL: r.TTL, Start: true, Reuse: r.Branch, Files: files, Backend: r.Backend})
	if err != nil {
		if errors.Is(err, sandbox.ErrSandboxExists) {
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q already exists", name),
				Hint: "run commands in it with 'agentkernel exec " + name + " -- COMMAND', or remove it with 'agentkernel rm -f " + name + "'"}
		}
		if errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
			return sandboxError(name, err)
		}
		return imageError(err)
	}
	if r.Detach {
		fmt.Fprintln(a.Stdout, name)
		return nil
	}
	if !created {
		a.Infof("agentkernel: running in the existing sandbox %s", name)
	}
	err = a.RunExec(ctx, m, name, r.Args, &runcli.ExecOptions{TTY: tty, Interactive: true, Output: r.Output})
	if r.Keep {
		fmt.Fprintf(a.Stderr, "agentkernel: kept as sandbox %s; agentkernel exec %s -- COMMAND runs more in it, agentkernel rm -f %s removes it (it expires in %s otherwise)\n",
			name, name, name, r.TTL)
	} else if created {
		a.Infof("agentkernel: sandbox %s keeps running: 'agentkernel exec %s -- COMMAND' runs more in it, 'agentkernel rm -f %s' removes it", name, name, name)
	}
	if errors.Is(err, sandbox.ErrSandboxNotFound) || errors.Is(err, sandbox.ErrNotRunning) {
		return sandboxError(name, err)
	}
	return err
}
