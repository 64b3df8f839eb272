// Package kubecli is the command line of agentkernel-kube, the binary
// that serves `-B kubernetes`: agentkernel-full hands it every sandbox
// command line that names the kubernetes backend (fullbin.WantsKube),
// and it also runs as the in-cluster controller of the AgentSandbox and
// AgentSandboxPool resources.
package kubecli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/backend/kubernetes"
	"github.com/agentkernel/agentkernel/internal/config"
)

// Exit codes: agentkernel's own refusals and failures are 125, as in the
// rest of the command line.
const (
	exitOK      = 0
	exitFailure = 125
)

type app struct {
	stdout, stderr io.Writer
	configPath     string
	backendName    string
	opts           kubernetes.Options
	maxSandboxes   int64
	quiet          bool
	// args is the whole command line, for serve.
	args []string
}

// Main runs one command line (args without the program name) and
// returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, args: args}
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
	return exitOK
}

// MainOS is Main for a process: os.Args, stdio, and SIGINT/SIGTERM
// ending the context.
func MainOS() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "agentkernel -B kubernetes",
		Short: "Sandboxes as Kubernetes pods",
		Long: `The kubernetes backend: each sandbox is a pod with a NetworkPolicy of its own,
in one namespace of a cluster, made through the Kubernetes API.

The cluster is the one [orchestrator] names in your configuration (kubeconfig,
context, namespace, runtime_class, service_account), else $KUBECONFIG or
~/.kube/config; flags override it. A project's agentkernel.toml is never
read for it: only your own file, or the one --config names.

See docs/kubernetes.md for the pod each profile makes and the role the
backend needs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return a.load(cmd)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&a.backendName, "backend", "B", "kubernetes", "backend (only kubernetes here)")
	pf.StringVarP(&a.configPath, "config", "c", "", "configuration file to read [orchestrator] from (default: your user configuration)")
	// agentkernel's other global flags, accepted so that a command line
	// agentkernel-full hands over parses here too.
	var dataDir, logLevel string
	pf.StringVar(&dataDir, "data-dir", "", "agentkernel's data directory (not used by this backend)")
	pf.StringVar(&logLevel, "log-level", "warn", "log verbosity (not used by this backend)")
	pf.BoolVarP(&a.quiet, "quiet", "q", false, "print only results and errors")
	_ = pf.MarkHidden("data-dir")
	_ = pf.MarkHidden("log-level")
	pf.StringVar(&a.opts.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: [orchestrator] kubeconfig, $KUBECONFIG, ~/.kube/config)")
	pf.StringVar(&a.opts.Context, "context", "", "kubeconfig context")
	pf.StringVarP(&a.opts.Namespace, "namespace", "n", "", "namespace (default: [orchestrator] namespace, the context's, default)")
	pf.StringVar(&a.opts.RuntimeClass, "runtime-class", "", "pods' runtimeClassName, such as gvisor or kata")
	pf.BoolVar(&a.opts.InCluster, "in-cluster", false, "use the pod's service account (running inside the cluster)")
	pf.BoolVar(&a.opts.NoUserNamespace, "no-user-namespace", false, "do not ask for a user namespace (hostUsers: false) on clusters whose nodes cannot give one")
	pf.StringVar(&a.opts.EgressImage, "egress-image", "", "image of the egress proxy that domain lists need, holding agentkernel-full (default: [orchestrator] egress_image)")

	sb := &cobra.Command{Use: "sandbox", Short: "Create, list and remove sandboxes"}
	sb.AddCommand(a.createCmd(), a.listCmd(), a.removeCmd(), a.reapCmd(), a.execCmd())
	pool := &cobra.Command{Use: "pool", Short: "Warm pools of waiting pods"}
	pool.AddCommand(a.poolFillCmd(), a.poolDrainCmd())
	crds := &cobra.Command{Use: "crds", Short: "The AgentSandbox and AgentSandboxPool resource definitions"}
	crds.AddCommand(&cobra.Command{
		Use: "print", Short: "Print the CRDs as JSON (for kubectl apply -f -)", Args: cobra.NoArgs,
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := a.stdout.Write(kubernetes.CRDs)
			return err
		},
	}, &cobra.Command{
		Use: "install", Short: "Install (or update) the CRDs in the cluster", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			return b.InstallCRDs(cmd.Context())
		},
	})
	root.AddCommand(sb, pool, crds, a.controllerCmd(), a.runCmd(), a.cpCmd(), a.serveCmd(a.args))
	// The flat forms agentkernel also takes: create, list, remove, rm, ps, exec.
	for _, c := range []*cobra.Command{a.createCmd(), a.listCmd(), a.removeCmd(), a.execCmd()} {
		c.Hidden = true
		root.AddCommand(c)
	}
	return root
}

// load applies [orchestrator] from the trusted configuration under the
// flags, and checks -B.
func (a *app) load(cmd *cobra.Command) error {
	switch a.backendName {
	case "kubernetes", "k8s":
	default:
		return fmt.Errorf("backend %q: this binary serves only -B kubernetes", a.backendName)
	}
	c, _, err := config.LoadUser(config.LoadOptions{UserPath: a.configPath})
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	o := c.Orchestrator
	set := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	set(&a.opts.Kubeconfig, o.Kubeconfig)
	set(&a.opts.Context, o.Context)
	set(&a.opts.Namespace, o.Namespace)
	set(&a.opts.RuntimeClass, o.RuntimeClass)
	set(&a.opts.ServiceAccount, o.ServiceAccount)
	set(&a.opts.EgressImage, o.EgressImage)
	if len(a.opts.EgressResolvers) == 0 {
		a.opts.EgressResolvers = o.EgressDNS
	}
	a.maxSandboxes = o.MaxSandboxes
	a.opts.NoUserNamespace = a.opts.NoUserNamespace || o.NoUserNamespace
	return nil
}

func (a *app) createCmd() *cobra.Command {
	var (
		image, profile, network, pool string
		memory                        int64
		cpus                          float64
		ttl                           time.Duration
		env                           []string
	)
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a sandbox: a pod and its NetworkPolicy",
		Long: `Create a sandbox: a NetworkPolicy (which claims the name), then a pod that
idles (sleep infinity) until commands are exec'd into it. The image is
given to the cluster as it is: the cluster pulls it.

NAME is a DNS label (lower-case letters, digits, '-'), at most 51 characters.`,
		Example: `  agentkernel sandbox create dev -B kubernetes --image python:3.12 --profile restrictive --ttl 2h
  agentkernel sandbox create web -B kubernetes --image node:22 --network 10.0.0.0/8,192.0.2.7
  # names: the pod gets agentkernel's egress proxy (an image holding agentkernel-full)
  agentkernel sandbox create pip -B kubernetes --image python:3.12 --network pypi.org,files.pythonhosted.org \
    --egress-image registry.example/agentkernel:0.1.0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := kubernetes.LookupProfile(profile)
			if err != nil {
				return err
			}
			r := &kubernetes.Request{Name: args[0], Image: image, Profile: p, MemoryMB: memory, CPUPercent: int64(cpus*100 + 0.5), TTL: ttl, Env: env}
			if cpus < 0 {
				return fmt.Errorf("--cpus must not be negative")
			}
			if r.Network, r.AllowCIDRs, r.AllowDomains, err = kubernetes.ParseNetwork(network); err != nil {
				return err
			}
			if err := r.Check(); err != nil {
				return err
			}
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			if a.maxSandboxes > 0 {
				l, err := b.List(cmd.Context())
				if err != nil {
					return err
				}
				if int64(len(l)) >= a.maxSandboxes {
					return fmt.Errorf("namespace %s already has %d sandboxes ([orchestrator] max_sandboxes = %d): remove one first", b.Namespace(), len(l), a.maxSandboxes)
				}
			}
			var s *kubernetes.Sandbox
			adopted := false
			if pool != "" {
				s, adopted, err = b.CreateFromPool(cmd.Context(), &kubernetes.Pool{Name: pool, Image: image, Profile: p}, r)
			} else {
				s, err = b.Create(cmd.Context(), r)
			}
			if err != nil {
				return err
			}
			how := ""
			if adopted {
				how = " (from pool " + pool + ")"
			}
			fmt.Fprintf(a.stdout, "%s\n", s.Name)
			if !a.quiet {
				fmt.Fprintf(a.stderr, "sandbox %s: pod %s in namespace %s%s\n", s.Name, s.Pod, b.Namespace(), how)
			}
			if !s.UserNamespace && !a.opts.NoUserNamespace {
				fmt.Fprintf(a.stderr, "warning: the cluster dropped hostUsers: false: the pod has no user namespace (its nodes or API server lack user namespace support)\n")
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&image, "image", "", "image reference (required)")
	f.StringVarP(&profile, "profile", "p", "moderate", "security profile: restrictive, moderate or permissive")
	f.StringVar(&network, "network", "", "none, full, or what the sandbox may reach: address ranges (become a NetworkPolicy) and domain names (\"github.com,*.pypi.org\": through the pod's egress proxy, --egress-image) (default: the profile's)")
	f.Int64Var(&memory, "memory", 0, "memory limit in MiB (default: the profile's)")
	f.Float64Var(&cpus, "cpus", 0, "CPU limit in cores (default: the profile's)")
	f.DurationVar(&ttl, "ttl", 0, "remove the sandbox after this long (reaped by 'sandbox reap' or the controller)")
	f.StringArrayVarP(&env, "env", "e", nil, "KEY=VALUE in the sandbox's environment (repeatable)")
	f.StringVar(&pool, "pool", "", "adopt a waiting pod of this warm pool when it fits")
	return c
}

func (a *app) listCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use: "list", Aliases: []string{"ps", "ls"}, Short: "List the namespace's sandboxes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			l, err := b.List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					Name      string `json:"name"`
					Pod       string `json:"pod"`
					Phase     string `json:"phase"`
					Image     string `json:"image"`
					Profile   string `json:"profile"`
					Network   string `json:"network"`
					Created   string `json:"created"`
					ExpiresAt string `json:"expires_at,omitempty"`
				}
				rows := make([]row, 0, len(l))
				for _, s := range l {
					r := row{s.Name, s.Pod, string(s.Phase), s.Image, s.Profile, s.Network, s.Created.UTC().Format(time.RFC3339), ""}
					if !s.ExpiresAt.IsZero() {
						r.ExpiresAt = s.ExpiresAt.UTC().Format(time.RFC3339)
					}
					rows = append(rows, r)
				}
				e := json.NewEncoder(a.stdout)
				e.SetIndent("", "  ")
				return e.Encode(rows)
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tPHASE\tIMAGE\tPROFILE\tNETWORK\tEXPIRES")
			for _, s := range l {
				exp := "-"
				if !s.ExpiresAt.IsZero() {
					exp = s.ExpiresAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Phase, s.Image, s.Profile, s.Network, exp)
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) removeCmd() *cobra.Command {
	return &cobra.Command{
		Use: "remove NAME...", Aliases: []string{"rm", "delete"}, Short: "Remove sandboxes: pod and NetworkPolicy", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, n := range args {
				if err := kubernetes.ValidName(n); err != nil {
					return err
				}
			}
			b, err := kubernetes.New(a.opts)
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
		Use: "reap", Short: "Remove the sandboxes whose TTL has passed, once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			r, err := b.Reap(cmd.Context())
			for _, n := range r.Expired {
				fmt.Fprintf(a.stdout, "expired %s\n", n)
			}
			for _, n := range r.Orphans {
				fmt.Fprintf(a.stdout, "orphan policy %s\n", n)
			}
			return err
		},
	}
}

func (a *app) execCmd() *cobra.Command {
	return &cobra.Command{
		Use: "exec NAME -- COMMAND [ARG...]", Short: "Run a command in a sandbox (through the cluster's exec API)", Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			code, err := b.Exec(cmd.Context(), args[0], args[1:], kubernetes.ExecIO{Stdin: os.Stdin, Stdout: a.stdout, Stderr: a.stderr})
			if err != nil {
				return err
			}
			if code != 0 {
				return &exitError{code}
			}
			return nil
		},
	}
}

type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("command exited with status %d", e.code) }

func (a *app) poolFillCmd() *cobra.Command {
	var image, profile string
	var size int
	c := &cobra.Command{
		Use: "fill POOL", Short: "Bring a warm pool to --size waiting pods", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := kubernetes.LookupProfile(profile)
			if err != nil {
				return err
			}
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			n, err := b.Fill(cmd.Context(), &kubernetes.Pool{Name: args[0], Image: image, Profile: p, Size: size})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "pool %s: %d pods created\n", args[0], n)
			return nil
		},
	}
	c.Flags().StringVar(&image, "image", "", "image of the pool's pods (required)")
	c.Flags().StringVarP(&profile, "profile", "p", "moderate", "security profile")
	c.Flags().IntVar(&size, "size", 1, "pods kept waiting")
	return c
}

func (a *app) poolDrainCmd() *cobra.Command {
	return &cobra.Command{
		Use: "drain POOL", Short: "Delete a pool's waiting pods", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			return b.Drain(cmd.Context(), args[0])
		},
	}
}

func (a *app) controllerCmd() *cobra.Command {
	var interval time.Duration
	var once, install bool
	c := &cobra.Command{
		Use:   "controller",
		Short: "Reconcile AgentSandbox and AgentSandboxPool objects, and reap expired sandboxes",
		Long: `Run the reconciler: each AgentSandboxPool is filled, each AgentSandbox gets its
pod, NetworkPolicy and status, expired ones lose their sandbox, and sandboxes
whose TTL passed are removed. A pass runs as soon as one of those objects or
the backend's pods changes (the controller watches them), and every
--interval whatever happened. Inside the cluster run it
with --in-cluster under a service account with the role in docs/kubernetes.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval < time.Second {
				return fmt.Errorf("--interval must be at least 1s")
			}
			b, err := kubernetes.New(a.opts)
			if err != nil {
				return err
			}
			if install {
				if err := b.InstallCRDs(cmd.Context()); err != nil {
					return err
				}
			}
			var last error
			report := func(rc kubernetes.Reconciled, rp kubernetes.Reaped, err error) {
				last = err
				for _, n := range rc.Created {
					fmt.Fprintf(a.stdout, "created %s\n", n)
				}
				for _, n := range append(rc.Expired, rp.Expired...) {
					fmt.Fprintf(a.stdout, "expired %s\n", n)
				}
				for _, n := range rc.Removed {
					fmt.Fprintf(a.stdout, "removed %s\n", n)
				}
				for _, n := range rc.Failed {
					fmt.Fprintf(a.stdout, "failed %s\n", n)
				}
				if err != nil {
					fmt.Fprintf(a.stderr, "agentkernel: %v\n", err)
				}
			}
			if once {
				report(b.Pass(cmd.Context()))
				return last
			}
			b.RunController(cmd.Context(), interval, report)
			if errors.Is(cmd.Context().Err(), context.Canceled) {
				return nil
			}
			return last
		},
	}
	c.Flags().DurationVar(&interval, "interval", 30*time.Second, "time between passes when nothing changes (TTLs, missed events)")
	c.Flags().BoolVar(&once, "once", false, "one pass, then exit")
	c.Flags().BoolVar(&install, "install-crds", false, "install or update the CRDs first")
	return c
}
