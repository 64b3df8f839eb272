// Package nomadcli is the command line of `-B nomad` (agentkernel-full
// hands it every sandbox command line that names the nomad backend,
// fullbin.WantsNomad): sandbox create, list, remove, exec and reap, run
// and cp, over internal/backend/nomad. Nomad's API client is light
// enough to live in agentkernel-full (docs/nomad.md measures it), so
// unlike -B kubernetes there is no binary of its own.
package nomadcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/backend/nomad"
	"github.com/agentkernel/agentkernel/internal/clustercli"
	"github.com/agentkernel/agentkernel/internal/config"
)

// exitFailure is agentkernel's own refusals and failures.
const exitFailure = 125

type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	configPath     string
	backendName    string
	opts           nomad.Options
	maxSandboxes   int64
	quiet          bool
}

type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("command exited with status %d", e.code) }

// Main runs one command line (args without the program name) and
// returns the exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.root()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		fmt.Fprintf(stderr, "agentkernel: %v\n", err)
		return exitFailure
	}
	return 0
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "agentkernel -B nomad",
		Short: "Sandboxes as Nomad jobs",
		Long: `The nomad backend: each sandbox is a Nomad batch job with one task. With the
agentkernel driver (the default) the task runs the node's agentkernel, which
makes a native sandbox there and lives as long as it; exec and files go
through Nomad's allocation exec API into that sandbox. With nomad_driver =
"exec", Nomad's own exec driver isolates the task.

The cluster is the one [orchestrator] names in your configuration
(nomad_addr, nomad_token, namespace, nomad_driver, nomad_datacenter), else
$NOMAD_ADDR and $NOMAD_TOKEN; flags override it. A project's
agentkernel.toml is never read for it. See docs/nomad.md.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load()
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&a.backendName, "backend", "B", "nomad", "backend (only nomad here)")
	pf.StringVarP(&a.configPath, "config", "c", "", "configuration file to read [orchestrator] from (default: your user configuration)")
	var dataDir, logLevel string
	pf.StringVar(&dataDir, "data-dir", "", "agentkernel's data directory (not used by this backend)")
	pf.StringVar(&logLevel, "log-level", "warn", "log verbosity (not used by this backend)")
	pf.BoolVarP(&a.quiet, "quiet", "q", false, "print only results and errors")
	_ = pf.MarkHidden("data-dir")
	_ = pf.MarkHidden("log-level")
	pf.StringVar(&a.opts.Address, "nomad-addr", "", "Nomad API address (default: [orchestrator] nomad_addr, $NOMAD_ADDR, http://127.0.0.1:4646)")
	pf.StringVarP(&a.opts.Namespace, "namespace", "n", "", "Nomad namespace (default: [orchestrator] namespace, $NOMAD_NAMESPACE, default)")
	pf.StringVar(&a.opts.Driver, "driver", "", "task driver: agentkernel (the node's agentkernel in raw_exec) or exec")
	pf.StringVar(&a.opts.NodeAgentkernel, "node-agentkernel", "", "agentkernel-full's path on the nodes (default /usr/local/bin/agentkernel-full)")
	pf.StringVar(&a.opts.NodeDataDir, "node-data-dir", "", "the --data-dir of agentkernel on the nodes (default: its own)")

	sb := &cobra.Command{Use: "sandbox", Short: "Create, list and remove sandboxes"}
	sb.AddCommand(a.createCmd(), a.listCmd(), a.removeCmd(), a.reapCmd(), a.execCmd())
	root.AddCommand(sb, a.runCmd(), a.cpCmd(), a.poolCmd())
	for _, c := range []*cobra.Command{a.createCmd(), a.listCmd(), a.removeCmd(), a.execCmd()} {
		c.Hidden = true
		root.AddCommand(c)
	}
	return root
}

// load applies [orchestrator] of the trusted configuration under the
// flags, and checks -B.
func (a *app) load() error {
	if a.backendName != "nomad" {
		return fmt.Errorf("backend %q: this command line serves only -B nomad", a.backendName)
	}
	c, _, err := config.LoadUser(config.LoadOptions{UserPath: a.configPath})
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	o := c.Orchestrator
	from, err := nomad.OptionsOf(o)
	if err != nil {
		return err
	}
	set := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	set(&a.opts.Address, from.Address)
	set(&a.opts.Token, from.Token)
	set(&a.opts.Namespace, from.Namespace)
	set(&a.opts.Driver, from.Driver)
	set(&a.opts.NodeAgentkernel, from.NodeAgentkernel)
	set(&a.opts.NodeDataDir, from.NodeDataDir)
	a.opts.Datacenters = from.Datacenters
	a.maxSandboxes = o.MaxSandboxes
	return nil
}

// sandboxFlags are what create and run take to describe a sandbox.
type sandboxFlags struct {
	image, profile, network string
	allow                   []string
	memory                  int
}

func (f *sandboxFlags) add(c *cobra.Command) {
	fs := c.Flags()
	fs.StringVar(&f.image, "image", "", "image for the node's agentkernel (default: the node's agentkernel picks one)")
	fs.StringVarP(&f.profile, "profile", "p", "moderate", "security profile: restrictive, moderate or permissive")
	fs.StringVar(&f.network, "network", "", "none, filtered (with --allow-domain) or full (default: the profile's)")
	fs.StringArrayVar(&f.allow, "allow-domain", nil, "with --network filtered: a host name the sandbox may reach (repeatable)")
	fs.IntVar(&f.memory, "memory", 0, "memory in MiB: Nomad's reservation and the sandbox's limit (default 256)")
}

func (f *sandboxFlags) request(name string) *nomad.Request {
	return &nomad.Request{Name: name, Image: f.image, Profile: f.profile, Network: f.network, AllowDomains: f.allow, MemoryMB: f.memory}
}

func (a *app) backend() (*nomad.Backend, error) { return nomad.New(a.opts) }

// ready waits until the sandbox's task runs and a command runs in it,
// at most timeout.
func ready(ctx context.Context, b *nomad.Backend, name string, timeout time.Duration) error {
	_, err := b.Ready(ctx, name, timeout)
	return err
}

func (a *app) createCmd() *cobra.Command {
	var f sandboxFlags
	var ttl, timeout time.Duration
	var wait bool
	var pool string
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a sandbox: a Nomad job whose task holds it",
		Example: `  agentkernel sandbox create dev -B nomad --profile restrictive --ttl 2h
  agentkernel sandbox create web -B nomad --network filtered --allow-domain pypi.org`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := f.request(args[0])
			r.TTL = ttl
			if err := r.Check(a.opts.Driver); err != nil {
				return err
			}
			b, err := a.backend()
			if err != nil {
				return err
			}
			if a.maxSandboxes > 0 {
				l, err := b.List(cmd.Context())
				if err != nil {
					return err
				}
				if int64(len(l)) >= a.maxSandboxes {
					return fmt.Errorf("already %d sandboxes ([orchestrator] max_sandboxes = %d): remove one first", len(l), a.maxSandboxes)
				}
			}
			var s *nomad.Sandbox
			adopted := false
			if pool != "" {
				p := &nomad.Pool{Name: pool, Request: *f.request("pool")}
				s, adopted, err = b.CreateFromPool(cmd.Context(), p, r)
			} else {
				s, err = b.Create(cmd.Context(), r)
			}
			if err != nil {
				return err
			}
			if pool != "" && !a.quiet {
				if adopted {
					fmt.Fprintf(a.stderr, "sandbox %s: taken from pool %s\n", s.Name, pool)
				} else {
					fmt.Fprintf(a.stderr, "sandbox %s: pool %s has no waiting job of this spec: a job of its own\n", s.Name, pool)
				}
			}
			if wait {
				if err := ready(cmd.Context(), b, s.Name, timeout); err != nil {
					return err
				}
			}
			fmt.Fprintln(a.stdout, s.Name)
			if !a.quiet {
				if s.TaskJobID != s.JobID {
					// Nomad cannot rename the pool job it took, nor the
					// node's agentkernel its running sandbox.
					fmt.Fprintf(a.stderr, "sandbox %s: job %s (its name held by job %s); on the node, sandbox %s\n", s.Name, s.TaskJobID, s.JobID, s.NodeName)
				} else {
					fmt.Fprintf(a.stderr, "sandbox %s: job %s\n", s.Name, s.JobID)
				}
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().DurationVar(&ttl, "ttl", 0, "remove the sandbox after this long (by 'sandbox reap')")
	c.Flags().StringVar(&pool, "pool", "", "take a waiting job of this pool when its spec is the sandbox's ('pool fill -B nomad'), else make one")
	c.Flags().BoolVar(&wait, "wait", true, "wait until the sandbox answers")
	c.Flags().DurationVar(&timeout, "start-timeout", 2*time.Minute, "how long the sandbox may take to start")
	return c
}

func (a *app) listCmd() *cobra.Command {
	return &cobra.Command{
		Use: "list", Aliases: []string{"ps", "ls"}, Short: "List the sandboxes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := a.backend()
			if err != nil {
				return err
			}
			l, err := b.List(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSTATUS\tPROFILE\tNETWORK\tDRIVER\tEXPIRES\tON THE NODE")
			for _, s := range l {
				exp := "-"
				if !s.ExpiresAt.IsZero() {
					exp = s.ExpiresAt.UTC().Format(time.RFC3339)
				}
				node := s.NodeName
				if node == "" {
					node = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Status, s.Profile, s.Network, s.Driver, exp, node)
			}
			return w.Flush()
		},
	}
}

func (a *app) removeCmd() *cobra.Command {
	return &cobra.Command{
		Use: "remove NAME...", Aliases: []string{"rm", "delete"}, Short: "Remove sandboxes (their jobs, purged)", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := nomad.ValidName(n); err != nil {
					return err
				}
			}
			b, err := a.backend()
			if err != nil {
				return err
			}
			var failed []string
			for _, n := range args {
				if err := b.Remove(cmd.Context(), n); err != nil {
					fmt.Fprintf(a.stderr, "agentkernel: %v\n", err)
					failed = append(failed, n)
					continue
				}
				fmt.Fprintln(a.stdout, n)
			}
			if len(failed) > 0 {
				return fmt.Errorf("not removed: %s", strings.Join(failed, ", "))
			}
			return nil
		},
	}
}

func (a *app) reapCmd() *cobra.Command {
	return &cobra.Command{
		Use: "reap", Short: "Remove the sandboxes whose TTL has passed, and the warm pools' leftovers, once", Args: cobra.NoArgs,
		Long: `Remove the sandboxes whose TTL has passed, once, and the leftovers of
the warm pools: the waiting jobs of a server whose lease lapsed (it
died, or stopped without draining its pools), the jobs a sandbox claimed
but never got its name for, and the claims of jobs that are gone.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := a.backend()
			if err != nil {
				return err
			}
			names, err := b.Reap(cmd.Context())
			for _, n := range names {
				fmt.Fprintf(a.stdout, "expired %s\n", n)
			}
			if err != nil {
				return err
			}
			jobs, err := b.ReapPools(cmd.Context())
			for _, j := range jobs {
				fmt.Fprintf(a.stdout, "pool leftover %s\n", j)
			}
			return err
		},
	}
}

func (a *app) execCmd() *cobra.Command {
	var interactive bool
	c := &cobra.Command{
		Use: "exec NAME -- COMMAND [ARG...]", Short: "Run a command in a sandbox (through Nomad's exec API)", Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.backend()
			if err != nil {
				return err
			}
			var in io.Reader
			if interactive {
				in = a.stdin
			}
			code, err := b.Exec(cmd.Context(), args[0], args[1:], in, a.stdout, a.stderr)
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	return c
}

func (a *app) runCmd() *cobra.Command {
	var f sandboxFlags
	var interactive bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run one command in a new Nomad job's sandbox, then remove it",
		Long: `Run one command in a sandbox made for it on the Nomad cluster: a job whose task
holds the sandbox, the command run in it once it answers, then the job
purged, also when the run is interrupted. The exit status is the command's;
125 when the sandbox could not be made or did not start in --start-timeout.`,
		Example: `  agentkernel run -B nomad -- python3 -c 'print(1)'
  echo data | agentkernel run -B nomad -i --network none -- wc -c`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := clustercli.RunName()
			if err != nil {
				return err
			}
			r := f.request(name)
			// A run whose removal never happened is reaped after a day.
			r.TTL = 24 * time.Hour
			if err := r.Check(a.opts.Driver); err != nil {
				return err
			}
			b, err := a.backend()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if _, err := b.Create(ctx, r); err != nil {
				return err
			}
			defer func() {
				rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := b.Remove(rctx, name); err != nil && !errors.Is(err, nomad.ErrNotFound) {
					fmt.Fprintf(a.stderr, "agentkernel: removing the run's sandbox %s: %v (agentkernel sandbox rm -B nomad %s)\n", name, err, name)
				}
			}()
			if err := ready(ctx, b, name, timeout); err != nil {
				return err
			}
			var in io.Reader
			if interactive {
				in = a.stdin
			}
			code, err := b.Exec(ctx, name, args, in, a.stdout, a.stderr)
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code}
			}
			return nil
		},
	}
	f.add(c)
	c.Flags().BoolVarP(&interactive, "interactive", "i", false, "pass standard input to the command")
	c.Flags().DurationVar(&timeout, "start-timeout", 2*time.Minute, "how long the sandbox may take to start")
	return c
}

func (a *app) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox (NAME:PATH on one side)",
		Long: `Copy one regular file between this machine and a sandbox, through Nomad's exec
API: NAME:/path/in/sandbox on one side, a local path on the other. A local
directory as DST receives the file under its own name. Files up to 64 MiB.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := clustercli.CopySides(args[0], args[1]); err != nil {
				return err
			}
			b, err := a.backend()
			if err != nil {
				return err
			}
			return clustercli.Copy(cmd.Context(), b, args[0], args[1])
		},
	}
}

func (a *app) poolCmd() *cobra.Command {
	pc := &cobra.Command{Use: "pool", Short: "Warm pools: jobs started ahead, taken by 'sandbox create --pool'",
		Long: `A warm pool is a number of jobs started ahead, each running a sandbox of
the pool's spec (image, profile, network, memory) and waiting. 'sandbox
create NAME --pool POOL' with the same spec takes one: the sandbox answers
in the time of a few API requests instead of a job's start. A job is taken
through a Nomad Variable created with check-and-set, so two creates never
take one job; the token needs Nomad Variables under agentkernel/. A pool
filled here stands until 'pool drain'. See docs/nomad.md.`}
	var f sandboxFlags
	var size int
	var wait bool
	var timeout time.Duration
	fill := &cobra.Command{
		Use:   "fill POOL --size N [--image IMAGE] [-p PROFILE] [--network MODE] [--memory MIB]",
		Short: "Bring a pool to N waiting jobs",
		Example: `  agentkernel pool fill py -B nomad --image python:3.12-alpine --network none --size 4
  agentkernel sandbox create job1 -B nomad --pool py --image python:3.12-alpine --network none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.backend()
			if err != nil {
				return err
			}
			p := &nomad.Pool{Name: args[0], Request: *f.request("pool"), Size: size}
			n, err := b.Fill(cmd.Context(), p)
			if err != nil {
				return err
			}
			if wait {
				if err := b.WaitPool(cmd.Context(), p, size, timeout); err != nil {
					return err
				}
			}
			if !a.quiet {
				fmt.Fprintf(a.stderr, "pool %s: %d job(s) started, %d wanted\n", p.Name, n, size)
			}
			return nil
		},
	}
	f.add(fill)
	fill.Flags().IntVar(&size, "size", 1, "waiting jobs to keep")
	fill.Flags().BoolVar(&wait, "wait", false, "wait until every waiting job answers")
	fill.Flags().DurationVar(&timeout, "start-timeout", 5*time.Minute, "how long the jobs may take to answer, with --wait")
	drain := &cobra.Command{
		Use: "drain POOL", Short: "Purge a pool's waiting jobs (sandboxes taken from it stay)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := a.backend()
			if err != nil {
				return err
			}
			return b.Drain(cmd.Context(), &nomad.Pool{Name: args[0]})
		},
	}
	pc.AddCommand(fill, drain)
	return pc
}
