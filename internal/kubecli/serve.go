package kubecli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/audit"
	"github.com/agentkernel/agentkernel/internal/backend/kubernetes"
	"github.com/agentkernel/agentkernel/internal/cli"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/contract"
	"github.com/agentkernel/agentkernel/internal/doctor"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// serveCmd is `serve` with [sandbox] backend = "kubernetes" (agentkernel-full
// hands such a command line here whole): agentkernel's own serve (its
// flags, API keys, Host and Origin checks, MCP) over a sandbox.Manager
// whose runs and persistent sandboxes are pods.
func (a *app) serveCmd(args []string) *cobra.Command {
	return &cobra.Command{
		Use:                "serve [flags]",
		Short:              "Serve the HTTP API with sandboxes as pods (agentkernel serve --help)",
		DisableFlagParsing: true,
		PersistentPreRunE:  func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			app := cli.NewApp(runcli.App{Stdin: os.Stdin, Stdout: a.stdout, Stderr: a.stderr,
				Version: cli.VersionInfo{Version: "0.1.0-dev", Commit: runcli.Revision(), Go: runtime.Version()}})
			app.Serve = &cli.ServeBackend{Name: kubernetes.BackendName, Sandboxes: kubeSandboxes, Doctor: a.kubeDoctor(app)}
			argv := append([]string{"agentkernel"}, args...)
			if code := runcli.ExitCode(cli.NewRootCommandFor(app, argv).Execute(), a.stderr); code != 0 {
				return &exitError{code}
			}
			return nil
		},
	}
}

// orchestrator is the backend's options from [orchestrator] of the
// user's configuration or the --config file (never a project's).
func orchestrator(path string) (kubernetes.Options, config.Orchestrator, error) {
	c, _, err := config.LoadUser(config.LoadOptions{UserPath: path})
	if err != nil {
		return kubernetes.Options{}, config.Orchestrator{}, fmt.Errorf("configuration: %w", err)
	}
	o := c.Orchestrator
	return kubernetes.Options{Kubeconfig: o.Kubeconfig, Context: o.Context, Namespace: o.Namespace,
		RuntimeClass: o.RuntimeClass, ServiceAccount: o.ServiceAccount, NoUserNamespace: o.NoUserNamespace,
		EgressImage: o.EgressImage, EgressResolvers: o.EgressDNS}, o, nil
}

// kubeSandboxes is the Manager of serve on the kubernetes backend:
// RunBackend for runs, Sandboxes for persistent sandboxes (records in
// the namespace, Secrets every server of it shares; those an earlier
// version kept in the data directory moved there at start), ClusterImages (the nodes pull), the audit log of
// the data directory. Snapshots, warm pools of this machine and host
// statistics have no part here: the Manager refuses them
// (sandbox.ErrUnsupported, 501 from the API).
func kubeSandboxes(app *cli.App) (*sandbox.Manager, func(), error) {
	opts, o, err := orchestrator(app.ConfigPath)
	if err != nil {
		return nil, nil, &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: err}
	}
	b, err := kubernetes.New(opts)
	if err != nil {
		return nil, nil, &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: err, Hint: "[orchestrator] kubeconfig names the cluster (docs/kubernetes.md)"}
	}
	if err := os.MkdirAll(app.DataDir, 0o700); err != nil {
		return nil, nil, &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: err}
	}
	sbs := kubernetes.NewSandboxes(b, app.DataDir)
	sbs.MaxSandboxes = o.MaxSandboxes
	// Records an earlier version kept in the data directory go to the
	// cluster, once; the files are kept (moved aside), never deleted.
	mctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	moved, kept, err := sbs.MigrateLocal(mctx)
	cancel()
	for _, l := range moved {
		app.Infof("%s", l)
	}
	for _, l := range kept {
		app.Warnf("%s", l)
	}
	if err != nil {
		return nil, nil, &runcli.ExitError{Code: runcli.ExitAgentkernel, Err: fmt.Errorf("moving the sandboxes' records of %s into namespace %s: %w", app.DataDir, b.Namespace(), err),
			Hint: "the records stay in the data directory; serve moves them at its next start"}
	}
	app.Warnf("sandboxes are pods in namespace %s: the server's working directory does not reach them (/workspace is an empty directory of each pod)", b.Namespace())
	m := sandbox.NewManager(sandbox.ManagerOptions{
		Images:     kubernetes.ClusterImages{},
		Backends:   []sandbox.Backend{&kubernetes.RunBackend{B: b}},
		Default:    kubernetes.BackendName,
		Warn:       app.Warnf,
		Store:      sbs,
		Supervisor: sbs,
		Connector:  sbs,
		HostStats:  sbs,
		Audit:      audit.New(app.DataDir),
		Who:        runcli.Who("api"),
		Info:       app.Infof,
	})
	stop := func() {}
	if runController(o.Controller) {
		stop = serveController(app, b)
	}
	return m, stop, nil
}

// inClusterEnv is set in every container of a pod (the API server's
// service address), with the service account's token mounted beside it.
const inClusterEnv = "KUBERNETES_SERVICE_HOST"

// runController reports whether serve reconciles the CRDs: [orchestrator]
// controller "on", or "auto" (the default) inside a cluster.
func runController(setting string) bool {
	switch setting {
	case "on":
		return true
	case "off":
		return false
	}
	if os.Getenv(inClusterEnv) == "" {
		return false
	}
	_, err := os.Stat("/var/run/secrets/kubernetes.io/serviceaccount/token")
	return err == nil
}

// serveController runs the reconciler of AgentSandbox and
// AgentSandboxPool objects (agentkernel-kube controller's) for as long
// as serve runs, and returns what stops it. What it does goes to serve's
// log; a pass that fails is retried at the next event or resync.
func serveController(app *cli.App, b *kubernetes.Backend) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	app.Infof("reconciling AgentSandbox and AgentSandboxPool objects in namespace %s", b.Namespace())
	go func() {
		defer close(done)
		var lastErr string
		b.RunController(ctx, 30*time.Second, func(rc kubernetes.Reconciled, rp kubernetes.Reaped, err error) {
			for _, n := range rc.Created {
				app.Infof("controller: created %s", n)
			}
			for _, n := range append(rc.Expired, rp.Expired...) {
				app.Infof("controller: expired %s", n)
			}
			for _, n := range rc.Removed {
				app.Infof("controller: removed %s", n)
			}
			for _, n := range rc.Failed {
				app.Warnf("controller: %s failed", n)
			}
			// The same failure at every pass is said once.
			if err != nil && ctx.Err() == nil && err.Error() != lastErr {
				app.Warnf("controller: %v", err)
			}
			lastErr = ""
			if err != nil {
				lastErr = err.Error()
			}
		})
	}()
	return func() {
		cancel()
		<-done
	}
}

// kubeDoctor answers GET /doctor for serve on the kubernetes backend:
// whether the cluster answers (a list of the namespace's sandboxes' pods
// and of their records), and
// the kubernetes backend's known differences from the contract.
func (a *app) kubeDoctor(app *cli.App) func(r *http.Request) any {
	var mu sync.Mutex
	return func(r *http.Request) any {
		mu.Lock()
		defer mu.Unlock()
		rep := &doctor.Report{Backend: kubernetes.BackendName, Isolation: "full", Healthy: true,
			Why: "sandboxes are pods of the cluster [orchestrator] names, each with a NetworkPolicy of its own"}
		for _, be := range contract.All() {
			d := contract.For(be)
			if d == nil {
				d = []contract.Difference{}
			}
			rep.Contract = append(rep.Contract, doctor.BackendContract{Backend: be, Differences: d})
		}
		c := doctor.Check{Name: "cluster", Status: doctor.StatusOK}
		opts, _, err := orchestrator(app.ConfigPath)
		var b *kubernetes.Backend
		if err == nil {
			b, err = kubernetes.New(opts)
		}
		if err == nil {
			start := time.Now()
			var l []kubernetes.Sandbox
			var recs []*sandbox.Info
			if l, err = b.List(r.Context()); err == nil {
				// The persistent sandboxes' records: the rights on secrets.
				recs, err = kubernetes.NewSandboxes(b, app.DataDir).List(r.Context())
			}
			if err == nil {
				c.Message = fmt.Sprintf("namespace %s answers (%d pods of sandboxes, %d persistent sandboxes recorded, %v)", b.Namespace(), len(l), len(recs), time.Since(start).Round(time.Millisecond))
			}
		}
		if err != nil {
			c.Status, c.Message, rep.Healthy = doctor.StatusError, err.Error(), false
			c.Fix = "[orchestrator] kubeconfig, context and namespace in your configuration (docs/kubernetes.md)"
		}
		rep.Checks = append(rep.Checks, c)
		// Domain allow- and block-lists need the egress proxy's image.
		eg := doctor.Check{Name: "egress proxy", Status: doctor.StatusOK}
		if opts.EgressImage != "" {
			eg.Message = fmt.Sprintf("domain allow- and block-lists run through the egress proxy of image %s in each such pod", opts.EgressImage)
		} else {
			eg.Status = doctor.StatusInfo
			eg.Message = "no egress proxy image: sandboxes with a domain allow- or block-list are refused (address ranges and none/full work)"
			eg.Fix = "[orchestrator] egress_image = an image holding agentkernel-full (docs/kubernetes.md, Domain lists)"
		}
		rep.Checks = append(rep.Checks, eg)
		return rep
	}
}
