package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/store"
	"github.com/agentkernel/agentkernel/internal/supervisor"
)

const sandboxLong = `Persistent sandboxes: created once, started, used by many 'exec' and
'cp' calls, stopped and started again with their files intact.

'sandbox create' records a sandbox (image pulled, spec resolved) without
starting it; 'sandbox start' starts it: a small supervisor process per
sandbox keeps it running after the CLI exits (no daemon). The sandbox's
writable layer lives under the data directory, so files written inside
survive stop and start; the copy-on-write view of the project directory
(profile moderate) does not.

Names: 1-63 letters, digits, '-' and '_', starting and ending with a letter
or digit, no '--', '__', '-_' or '_-'.`

// sandboxCommands are the persistent-sandbox commands: the "sandbox"
// group and the top-level exec and cp.
func sandboxCommands(a *App) []*cobra.Command {
	sb := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sandboxes", "sb"},
		Short:   "Create, start, stop, list and remove persistent sandboxes",
		Long:    sandboxLong,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	sb.AddCommand(newSandboxCreateCmd(a), newSandboxStartCmd(a), newSandboxStopCmd(a), newSandboxRestartCmd(a),
		newSandboxRemoveCmd(a), newSandboxListCmd(a), newSandboxInfoCmd(a), newSandboxGCCmd(a),
		newSandboxExtendCmd(a), newSandboxSuperviseCmd(a))
	return []*cobra.Command{sb, newExecCmd(a), newCpCmd(a)}
}

// lifecycle opens the state store and returns the sandbox manager.
func (a *App) lifecycle(ctx context.Context) (*supervisor.Manager, func(), error) {
	st, err := store.Open(ctx, a.DataDir)
	if err != nil {
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	exe, err := os.Executable()
	if err != nil {
		st.Close()
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	m := &supervisor.Manager{DataDir: a.DataDir, Store: st, SuperviseCommand: func(name string) []string {
		argv := []string{exe, "--data-dir", a.DataDir, "--log-level", a.LogLevel}
		if a.ConfigPath != "" {
			argv = append(argv, "--config", a.ConfigPath)
		}
		return append(argv, "sandbox", "supervise", name)
	}}
	return m, func() { st.Close() }, nil
}

// sandboxError maps lifecycle errors to exit codes and hints.
func sandboxError(name string, err error) error {
	var ee *ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		return err
	case errors.Is(err, store.ErrNotFound):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q not found", name), Hint: "see 'agentkernel sandbox list --all'"}
	case errors.Is(err, store.ErrExists):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q already exists", name)}
	case errors.Is(err, supervisor.ErrNotRunning):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("sandbox %q is not running", name), Hint: "start it with 'agentkernel sandbox start " + name + "'"}
	}
	return &ExitError{Code: ExitAgentkernel, Err: err}
}

func validName(name string) error {
	if err := config.ValidateSandboxName(name); err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return nil
}

type createOptions struct {
	overrides   policy.Overrides
	labels      []string
	description string
	ttl         time.Duration
	start       bool
}

func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			k, v, ok = strings.Cut(kv, ":")
		}
		if !ok || k == "" {
			return nil, usageError("label %q: use KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

func newSandboxCreateCmd(a *App) *cobra.Command {
	var o createOptions
	cmd := &cobra.Command{
		Use:   "create [NAME] [flags]",
		Short: "Create a persistent sandbox (stopped; 'sandbox start' runs it)",
		Example: `  agentkernel sandbox create dev --image alpine:3.20 --label team=ml
  agentkernel sandbox create dev --ttl 2h --start`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.overrides.Set = changedFlags(cmd)
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return a.sandboxCreate(cmd.Context(), name, &o)
		},
	}
	fs := cmd.Flags()
	bindSpecFlags(fs, &o.overrides)
	for _, n := range []string{"tty", "interactive", "timeout", "keep", "pull"} {
		_ = fs.MarkHidden(n)
	}
	fs.StringArrayVar(&o.labels, "label", nil, "label KEY=VALUE (repeatable)")
	fs.StringVar(&o.description, "description", "", "free-form description")
	fs.DurationVar(&o.ttl, "ttl", 0, "remove the sandbox this long after creation (by 'sandbox gc'), e.g. 1h")
	fs.BoolVar(&o.start, "start", false, "start the sandbox right away")
	return cmd
}

func (a *App) sandboxCreate(ctx context.Context, name string, o *createOptions) error {
	if name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		name = "sandbox-" + hex.EncodeToString(b[:])
	}
	if err := validName(name); err != nil {
		return err
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	cfg, err := a.loadConfig(cwd)
	if err != nil {
		return err
	}
	o.overrides.Name = name
	det := detect.Image(detect.Input{ExplicitImage: o.overrides.Image, ConfigImage: cfg.Sandbox.BaseImage, ConfigRuntime: cfg.Sandbox.Runtime, Dir: cwd})
	home, _ := os.UserHomeDir()
	spec, warnings, err := policy.Resolve(policy.Input{Config: cfg, Overrides: o.overrides, Cwd: cwd, HomeDir: home, HostEnv: os.LookupEnv, Detected: det})
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	for _, w := range warnings {
		a.Warnf("%s", w)
	}
	if err := a.applyNetworkStopgap(spec, cfg, &runOptions{overrides: o.overrides}); err != nil {
		return err
	}
	spec.Resources.Timeout = 0
	spec.TTY, spec.Interactive, spec.Keep = false, false, false
	mgr, err := a.manager()
	if err != nil {
		return err
	}
	if err := mgr.PrepareRootfs(ctx, spec); err != nil {
		return imageError(err)
	}
	lc, done, err := a.lifecycle(ctx)
	if err != nil {
		return err
	}
	defer done()
	uuid := store.NewUUID()
	spec.ID = strings.ReplaceAll(uuid, "-", "")
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	res, _ := json.Marshal(spec.Resources)
	rec := &store.Sandbox{Name: name, UUID: uuid, Image: spec.Image, ImageDigest: spec.Rootfs.Digest, Backend: "native",
		Profile: spec.Profile, Resources: res, Spec: specJSON, Labels: labels, Description: o.description}
	if o.ttl > 0 {
		exp := time.Now().Add(o.ttl).UTC()
		rec.ExpiresAt = &exp
	}
	if err := lc.Create(ctx, rec); err != nil {
		return sandboxError(name, err)
	}
	if o.start {
		if _, err := lc.Start(ctx, name); err != nil {
			return sandboxError(name, err)
		}
	}
	fmt.Fprintln(a.Stdout, name)
	return nil
}

func nameCmd(a *App, use, short string, run func(ctx context.Context, lc *supervisor.Manager, name string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validName(args[0]); err != nil {
				return err
			}
			lc, done, err := a.lifecycle(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			return sandboxError(args[0], run(cmd.Context(), lc, args[0]))
		},
	}
}

func newSandboxStartCmd(a *App) *cobra.Command {
	return nameCmd(a, "start", "Start a sandbox (its supervisor keeps it running)", func(ctx context.Context, lc *supervisor.Manager, name string) error {
		_, err := lc.Start(ctx, name)
		return err
	})
}

func newSandboxStopCmd(a *App) *cobra.Command {
	return nameCmd(a, "stop", "Stop a sandbox: SIGTERM to its processes, SIGKILL after 3 s; files are kept", func(ctx context.Context, lc *supervisor.Manager, name string) error {
		_, err := lc.Stop(ctx, name, "stopped by user")
		return err
	})
}

func newSandboxRestartCmd(a *App) *cobra.Command {
	return nameCmd(a, "restart", "Stop and start a sandbox", func(ctx context.Context, lc *supervisor.Manager, name string) error {
		if _, err := lc.Stop(ctx, name, "restarted"); err != nil {
			return err
		}
		_, err := lc.Start(ctx, name)
		return err
	})
}

func newSandboxRemoveCmd(a *App) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "remove NAME...",
		Aliases: []string{"rm", "delete"},
		Short:   "Remove sandboxes and their files (--force stops running ones)",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			lc, done, err := a.lifecycle(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			for _, n := range args {
				if err := validName(n); err != nil {
					return err
				}
				if err := lc.Remove(cmd.Context(), n, force); err != nil {
					return sandboxError(n, err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "stop the sandbox first if it is running")
	return cmd
}

func labelString(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + l[k]
	}
	return strings.Join(keys, ",")
}

func age(t time.Time) string {
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

func newSandboxListCmd(a *App) *cobra.Command {
	var labels []string
	var all, asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "ps"},
		Short:   "List sandboxes (running ones; --all for every one)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			want, err := parseLabels(labels)
			if err != nil {
				return err
			}
			lc, done, err := a.lifecycle(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			list, err := lc.List(cmd.Context())
			if err != nil {
				return sandboxError("", err)
			}
			out := []*store.Sandbox{}
		next:
			for _, sb := range list {
				if !all && !asJSON && sb.Status != store.StatusRunning {
					continue
				}
				for k, v := range want {
					if got, ok := sb.Labels[k]; !ok || got != v {
						continue next
					}
				}
				sb.Spec = nil
				out = append(out, sb)
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATUS\tIMAGE\tBACKEND\tAGE\tLABELS")
			for _, sb := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.Name, sb.Status, sb.Image, sb.Backend, age(sb.CreatedAt), labelString(sb.Labels))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&labels, "label", nil, "only sandboxes with label KEY=VALUE (repeatable, all must match)")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include stopped sandboxes")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (every sandbox unless filtered by label)")
	return cmd
}

func newSandboxInfoCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := nameCmd(a, "info", "Show one sandbox", nil)
	cmd.Aliases = []string{"inspect", "show"}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name := args[0]
		if err := validName(name); err != nil {
			return err
		}
		lc, done, err := a.lifecycle(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		sb, err := lc.Get(cmd.Context(), name)
		if err != nil {
			return sandboxError(name, err)
		}
		if asJSON {
			enc := json.NewEncoder(a.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(sb)
		}
		w := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "Name:\t%s\nUUID:\t%s\nStatus:\t%s\n", sb.Name, sb.UUID, sb.Status)
		if sb.StopReason != "" && sb.Status != store.StatusRunning {
			fmt.Fprintf(w, "Stop reason:\t%s\n", sb.StopReason)
		}
		fmt.Fprintf(w, "Image:\t%s\n", sb.Image)
		if sb.ImageDigest != "" {
			fmt.Fprintf(w, "Digest:\t%s\n", sb.ImageDigest)
		}
		fmt.Fprintf(w, "Backend:\t%s\nProfile:\t%s\nResources:\t%s\n", sb.Backend, sb.Profile, sb.Resources)
		if len(sb.Labels) > 0 {
			fmt.Fprintf(w, "Labels:\t%s\n", labelString(sb.Labels))
		}
		if sb.Description != "" {
			fmt.Fprintf(w, "Description:\t%s\n", sb.Description)
		}
		fmt.Fprintf(w, "Created:\t%s\nLast activity:\t%s\n", sb.CreatedAt.Format(time.RFC3339), sb.LastActivityAt.Format(time.RFC3339))
		if sb.ExpiresAt != nil {
			fmt.Fprintf(w, "Expires:\t%s\n", sb.ExpiresAt.Format(time.RFC3339))
		}
		if sb.Status == store.StatusRunning {
			fmt.Fprintf(w, "Supervisor:\tpid %d\n", sb.SupervisorPID)
		}
		fmt.Fprintf(w, "Directory:\t%s\n", lc.Dir(name))
		return w.Flush()
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSandboxGCCmd(a *App) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove expired sandboxes, leftovers of dead supervisors and orphaned directories",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			lc, done, err := a.lifecycle(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			removed, err := lc.GC(cmd.Context(), dryRun)
			if !dryRun {
				more, gerr := native.GC(cmd.Context(), a.DataDir)
				removed = append(removed, more...)
				err = errors.Join(err, gerr)
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			for _, r := range removed {
				fmt.Fprintf(a.Stdout, "%s %s\n", verb, r)
			}
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("gc: %w", err)}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	return cmd
}

func newSandboxExtendCmd(a *App) *cobra.Command {
	var by time.Duration
	cmd := nameCmd(a, "extend-ttl", "Push a sandbox's expiry back", func(ctx context.Context, lc *supervisor.Manager, name string) error {
		if by <= 0 {
			return usageError("--by must be a positive duration such as 1h")
		}
		sb, err := lc.Store.Update(ctx, name, func(s *store.Sandbox) error {
			base := time.Now()
			if s.ExpiresAt != nil && s.ExpiresAt.After(base) {
				base = *s.ExpiresAt
			}
			exp := base.Add(by).UTC()
			s.ExpiresAt = &exp
			return nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintln(a.Stdout, sb.ExpiresAt.Format(time.RFC3339))
		return nil
	})
	cmd.Flags().DurationVar(&by, "by", time.Hour, "how much longer the sandbox may live")
	return cmd
}

// newSandboxSuperviseCmd is the hidden supervisor mode that 'sandbox
// start' spawns; it never touches the state database.
func newSandboxSuperviseCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:    "supervise NAME",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ready *os.File
			if os.Getenv("AGENTKERNEL_SUPERVISOR_READY_FD") == "3" {
				ready = os.NewFile(3, "ready")
				_ = os.Unsetenv("AGENTKERNEL_SUPERVISOR_READY_FD")
			}
			lc := &supervisor.Manager{DataDir: a.DataDir}
			dir := lc.Dir(args[0])
			fail := func(err error) error {
				if ready != nil {
					fmt.Fprintf(ready, "error: %v", err)
					ready.Close()
				}
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			if ready != nil {
				// Not inherited by the sandbox's init.
				_, _ = ready.Stat()
				if err := setCloexec(ready); err != nil {
					return fail(err)
				}
			}
			b, err := os.ReadFile(dir + "/spec.json")
			if err != nil {
				return fail(err)
			}
			var spec sandbox.Spec
			if err := json.Unmarshal(b, &spec); err != nil {
				return fail(fmt.Errorf("spec.json: %w", err))
			}
			be := native.New(native.Options{DataDir: a.DataDir, Logger: a.Logger, Warn: func(s string) { a.Warnf("%s", s) }})
			if err := supervisor.Serve(context.Background(), be, &spec, dir, ready); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			return nil
		},
	}
}
