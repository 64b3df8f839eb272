package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/doctor"
	"github.com/agentkernel/agentkernel/internal/plugin"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const doctorLong = `Check what isolation 'agentkernel run' gets on this host, and why.

Each line is one capability, probed with the code runs use (a user
namespace and an overlay made in a child, a cgroup with limits made and
removed, a seccomp filter loaded, Landlock's ABI, /dev/net/tun opened,
/dev/kvm asked for a VM, other runtimes' --version), what it enables and,
when missing, the one command or setting that fixes it. The last line is
the backend and isolation level runs get: full, degraded (a protection
missing and allowed by [security] allow_degraded) or refused.

The fallback ladder: a missing protection that weakens isolation refuses
the run (exit 125) unless [security] allow_degraded in your user config
(or a --config file) names it ("cgroups", "landlock"); then each run says
once what it goes without. Seccomp, namespaces and overlayfs are never
degraded. See docs/doctor.md.

Exit status: 0 when no check is an error, 1 otherwise.`

func newDoctorCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "doctor [--json]",
		Short:   "Check what isolation runs get on this host, and how to fix what is missing",
		Long:    doctorLong,
		Example: "  agentkernel doctor\n  agentkernel doctor --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.doctorReport(cmd)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				r.WriteText(a.Stdout)
				fmt.Fprintf(a.Stdout, "-B auto: %s (%s; a run that gvisor cannot take goes to native)\n", r.Auto.Backend, r.Auto.Why)
			}
			if !r.Healthy {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON (the shape of GET /doctor)")
	return cmd
}

// doctorReport probes the host for this user, with the trusted
// configuration's allow_degraded.
func (a *App) doctorReport(cmd *cobra.Command) (*doctor.Report, error) {
	c, err := a.LoadConfig(".")
	if err != nil {
		return nil, err
	}
	r := doctor.Run(cmdContext(cmd), doctor.Options{DataDir: a.DataDir, AllowDegraded: c.Security.AllowDegraded})
	b, why := a.pickAuto(cmdContext(cmd), nil)
	r.Auto = &doctor.AutoChoice{Backend: b, Why: why}
	return r, nil
}

func newStatusCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show whether agentkernel is ready here: isolation, data directory, plugins, completion",
		Long: `Show whether agentkernel is ready to use: the isolation runs get (the
verdict of 'agentkernel doctor'), the data directory, the agent plugins
installed and the shell completion. 'agentkernel setup' does what is
missing of the last three; 'agentkernel doctor' explains the first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := a.doctorReport(cmd)
			if err != nil {
				return err
			}
			w := a.Stdout
			fmt.Fprintln(w, "Setup Status:")
			fmt.Fprintf(w, "  Backend:      %s, %s, isolation %s\n", r.Backend, map[bool]string{true: "rootless", false: "as root"}[r.Rootless], r.Isolation)
			dataOK := dirExists(a.DataDir)
			fmt.Fprintf(w, "  Data dir:     %s (%s)\n", a.DataDir, yesNo(dataOK, "exists", "not created"))
			var plugins []string
			if o, err := pluginOptions(); err == nil {
				for _, s := range plugin.List(o) {
					switch {
					case s.Project && s.Global:
						plugins = append(plugins, s.Target+" (project, global)")
					case s.Project:
						plugins = append(plugins, s.Target+" (project)")
					case s.Global:
						plugins = append(plugins, s.Target+" (global)")
					}
				}
			}
			fmt.Fprintf(w, "  Plugins:      %s\n", yesNo(len(plugins) > 0, strings.Join(plugins, ", "), "none installed"))
			path, _ := completionPath()
			fmt.Fprintf(w, "  Completion:   %s\n", yesNo(path != "" && fileExists(path), path, "not installed"))
			if r.Healthy && dataOK {
				fmt.Fprintln(w, "Agentkernel is ready to use!")
				return nil
			}
			if !r.Healthy {
				fmt.Fprintln(w, "Runs are refused here: see 'agentkernel doctor' for what is missing and how to fix it.")
			} else {
				fmt.Fprintln(w, "Run 'agentkernel setup' to complete installation.")
			}
			return &ExitError{Code: 1}
		},
	}
}

func newSetupCmd(a *App) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "setup [-y]",
		Short: "Check this host and set up what agentkernel installs for you",
		Long: `Set up agentkernel for this user: check the host ('agentkernel doctor'; a
missing capability is only reported, with its fix, never changed here),
create the data directory, and install the shell completion of $SHELL
(bash or fish, in your own directories). With --yes, it also installs the
agent plugins (user-wide) of the coding agents found on PATH; without,
it prints the commands that would.

Nothing outside your own files is changed: sysctls, cgroup delegation and
device permissions are yours to change, as 'agentkernel doctor' says.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := a.Stdout
			r, err := a.doctorReport(cmd)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "Host: backend %s, isolation %s: %s\n", r.Backend, r.Isolation, r.Why)
			for _, c := range r.Checks {
				if (c.Status == doctor.StatusError || c.Status == doctor.StatusWarning) && c.Fix != "" {
					fmt.Fprintf(w, "  %s %s: %s\n    fix: %s\n", c.Status, c.Name, c.Message, c.Fix)
				}
			}
			if err := os.MkdirAll(a.DataDir, 0o700); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("data directory: %w", err)}
			}
			fmt.Fprintf(w, "Data dir: %s\n", a.DataDir)
			if path, shell := completionPath(); path == "" {
				fmt.Fprintf(w, "Completion: not installed for shell %q (see 'agentkernel completion --help')\n", shell)
			} else if err := a.installCompletion(cmd.Root(), path, shell); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("shell completion: %w", err)}
			} else {
				fmt.Fprintf(w, "Completion: %s\n", path)
			}
			o, err := pluginOptions()
			if err != nil {
				return err
			}
			o.Global = true
			for _, ag := range knownAgents {
				if _, err := exec.LookPath(ag.Binary); err != nil {
					continue
				}
				if _, global := plugin.Installed(ag.Target, o); global {
					fmt.Fprintf(w, "Plugin %s: installed\n", ag.Target)
					continue
				}
				if !yes {
					fmt.Fprintf(w, "Plugin %s: %s found; install with: agentkernel plugin install %s --global (or setup --yes)\n", ag.Target, ag.Name, ag.Target)
					continue
				}
				if _, err := plugin.Install(ag.Target, o); err != nil {
					return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("plugin %s: %w", ag.Target, err)}
				}
				fmt.Fprintf(w, "Plugin %s: installed\n", ag.Target)
			}
			if !r.Healthy {
				fmt.Fprintln(w, "Runs are refused here until the fixes above are made ('agentkernel doctor' to check again).")
				return &ExitError{Code: 1}
			}
			fmt.Fprintln(w, "Agentkernel is set up and ready to use!")
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "also install the plugins of the agents found on PATH, without asking")
	return cmd
}

// completionPath is where setup installs $SHELL's completion script: the
// user's own bash-completion or fish directory; "" for other shells.
func completionPath() (path, shell string) {
	shell = filepath.Base(os.Getenv("SHELL"))
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", shell
	}
	data := os.Getenv("XDG_DATA_HOME")
	if data == "" || !filepath.IsAbs(data) {
		data = filepath.Join(home, ".local", "share")
	}
	conf := os.Getenv("XDG_CONFIG_HOME")
	if conf == "" || !filepath.IsAbs(conf) {
		conf = filepath.Join(home, ".config")
	}
	switch shell {
	case "bash":
		return filepath.Join(data, "bash-completion", "completions", "agentkernel"), shell
	case "fish":
		return filepath.Join(conf, "fish", "completions", "agentkernel.fish"), shell
	}
	return "", shell
}

// installCompletion writes shell's completion script to path.
func (a *App) installCompletion(root *cobra.Command, path, shell string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	var err error
	if shell == "fish" {
		err = root.GenFishCompletion(&b, true)
	} else {
		err = root.GenBashCompletionV2(&b, true)
	}
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// apiDoctor is GET /doctor's answer: the report for the server's user
// and its configuration's allow_degraded, one request's probes at a time
// (each starts child processes).
func (a *App) apiDoctor(allow []string, m *sandbox.Manager, backend string) func(r *http.Request) any {
	var mu sync.Mutex
	return func(r *http.Request) any {
		mu.Lock()
		defer mu.Unlock()
		rep := doctor.Run(r.Context(), doctor.Options{DataDir: a.DataDir, AllowDegraded: allow})
		// A server whose sandboxes are a cluster's jobs says so, and
		// whether the cluster answers.
		if b, err := m.Backend(backend); err == nil {
			if rm, ok := b.(sandbox.Remote); ok {
				rep.Backend = b.Name()
				rep.Why = "the server's backend is " + b.Name() + ": each sandbox is " + rm.Remote() + ", isolated by the node that runs it; " + rep.Why
				if p, ok := b.(interface {
					Probe(context.Context) (string, error)
				}); ok {
					c := doctor.Check{Name: b.Name(), Status: doctor.StatusOK}
					if line, err := p.Probe(r.Context()); err != nil {
						c.Status, c.Message = doctor.StatusError, err.Error()
					} else {
						c.Message = line
					}
					rep.Checks = append(rep.Checks, c)
				}
			}
		}
		return rep
	}
}
