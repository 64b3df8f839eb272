package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A sandbox's TTL, kept by its own supervisor (package supervisor,
// ttl_linux.go): when it has passed, the supervisor starts the hidden
// `sandbox expire NAME` (expireCommand), which stops the sandbox and
// removes it through the state store, audited as any remove.

// expireCommand is the command line the supervisor of sandbox name in
// dataDir starts when the sandbox has expired: this binary's hidden
// `sandbox expire`.
func expireCommand(dataDir, name string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "--data-dir", dataDir, "sandbox", "expire", name)
	// Its own session: it stops the supervisor that started it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr // the supervisor's log
	return cmd, nil
}

// startExpire is the supervisor's WithExpiry: it starts expireCommand and
// reaps it in the background.
func startExpire(dataDir, name string, warn func(string)) func() {
	return func() {
		cmd, err := expireCommand(dataDir, name)
		if err == nil {
			err = cmd.Start()
		}
		if err != nil {
			warn(fmt.Sprintf("sandbox %s has expired, but removing it failed: %v", name, err))
			return
		}
		go func() { _ = cmd.Wait() }()
	}
}

// newSandboxExpireCmd is the hidden `sandbox expire NAME`: it removes the
// sandbox if its expiry has passed (running or not) and does nothing
// otherwise (extended meanwhile).
func newSandboxExpireCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:    "expire NAME",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := validName(name); err != nil {
				return err
			}
			m, done, err := a.sandboxesFor("supervisor (expired)")
			if err != nil {
				return err
			}
			defer done()
			ctx := cmdContext(cmd)
			sb, err := m.Get(ctx, name)
			if err != nil {
				return sandboxError(name, err)
			}
			if sb.ExpiresAt == nil || time.Now().Before(*sb.ExpiresAt) {
				return nil
			}
			return sandboxError(name, m.Remove(ctx, name, true))
		},
	}
}

// expiresIn is a sandbox's expiry for 'sandbox list': "-" for none,
// "in 59m", or "expired".
func expiresIn(sb *sandbox.Info) string {
	if sb.ExpiresAt == nil {
		return "-"
	}
	d := time.Until(*sb.ExpiresAt)
	switch {
	case d <= 0:
		return "expired"
	case d < time.Minute:
		return "in " + strconv.Itoa(int(d.Seconds())+1) + "s"
	case d < time.Hour:
		return "in " + strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return "in " + strconv.Itoa(int(d.Hours())) + "h"
	}
	return "in " + strconv.Itoa(int(d.Hours()/24)) + "d"
}

// configFiles turns the configuration's [[files]] into what a persistent
// sandbox copies in at each start: sources made absolute (relative to
// the file that named them) and, for a project's agentkernel.toml,
// confined to that file's directory, so that a project cannot have a
// host file such as ~/.ssh/id_ed25519 copied into its sandbox.
func configFiles(cfg *config.Config, dir string) ([]sandbox.FileCopy, error) {
	var out []sandbox.FileCopy
	for i, f := range cfg.Files {
		key := fmt.Sprintf("files[%d].source", i)
		base := cfg.BaseDir(key, dir)
		src := f.Source
		if !filepath.IsAbs(src) {
			src = filepath.Join(base, src)
		}
		abs, err := filepath.Abs(src)
		if err != nil {
			return nil, err
		}
		base, err = filepath.Abs(base)
		if err != nil {
			return nil, err
		}
		fc := sandbox.FileCopy{Source: abs, Dest: f.Dest, Mode: 0o644}
		if f.Mode != "" {
			m, err := strconv.ParseUint(f.Mode, 8, 32)
			if err != nil {
				return nil, fmt.Errorf("[[files]] %s: mode %q: %w", f.Source, f.Mode, err)
			}
			fc.Mode = os.FileMode(m).Perm()
		}
		if cfg.Source(key).Kind == config.SourceProject {
			fc.Within = base
			if rel, err := filepath.Rel(base, abs); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return nil, fmt.Errorf("[[files]] source %s is outside %s: a project's agentkernel.toml may only copy its own files into the sandbox (name other files in your user config)", f.Source, base)
			}
		}
		out = append(out, fc)
	}
	return out, nil
}
