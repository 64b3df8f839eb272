package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/api"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/mcp"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const serveLong = `Serve the HTTP API that the official agentkernel SDKs (Node, Go, Python,
Rust, Swift) and agent plugins talk to: run commands in fresh sandboxes
(POST /run, POST /run/stream with Server-Sent Events), manage persistent
sandboxes, their files and logs. GET /openapi.yaml describes every route;
GET /metrics is in the Prometheus text format; /mcp serves the MCP tools
over streamable HTTP.

Where it listens:
  (default)            TCP on --host 127.0.0.1 --port 18888
  --unix PATH          a unix socket instead (mode 0600), for your user
                       only; add --host or --port to serve TCP as well

API keys. Over TCP every request but GET /health needs
'Authorization: Bearer <key>'. Keys come from --api-key-file (a regular
file of at most 64 KiB, one key per line) and --api-key, else
$AGENTKERNEL_API_KEY, else [api] api_key_env / api_key in your user
config (~/.config/agentkernel/config.toml) or a --config file. A source
that is given but empty or unreadable is an error. With none of those,
the key in the file api-key of the data directory is used (--data-dir;
default $XDG_DATA_HOME/agentkernel, else ~/.local/share/agentkernel),
made (32 random bytes, mode 0600) on the first start; the server says
where it is, and how to hand it to the SDKs:
  export AGENTKERNEL_API_KEY="$(cat <data-dir>/api-key)"
The data directory must be yours and not writable by other users.
--api-key KEY works too, but other users of the machine can read a
command line (ps): prefer the file or the variable. On the unix socket
your own user needs no key (except from inside a sandbox, which must
send it) and other users are refused, whatever the socket file's mode.
--insecure-no-auth serves TCP without a key, with a warning on every
start: anyone who can connect to the port, other users of this machine
included, can then run commands; with --unix alone it has no effect (a
warning says so).

Web pages. A page in your browser can send requests to 127.0.0.1, so
every request is checked before anything else: its Host must name this
server (localhost, *.localhost, a loopback address, the address it
listens on, a --host name, or --allowed-host NAME; "*" allows any), which
stops DNS rebinding; a request carrying an Origin header (browsers send
one) is refused unless --allowed-origin lets that origin in, with CORS
answers; a request body must be Content-Type: application/json (one
Content-Type header), which HTML forms and simple cross-site requests
cannot send. Refusals answer 403 or 415 and are logged. --allowed-host
and --allowed-origin also come from [api] allowed_hosts / allowed_origins
in your user config or a --config file.

A project's own agentkernel.toml (the one in the working directory,
perhaps of a repository you just cloned) cannot choose who may use the
API: its [api] api_key, api_key_env, allowed_hosts and allowed_origins
are ignored with a warning, and your user config's values stand.

The server's working directory is the project directory of its sandboxes
(agentkernel.toml, image detection, /workspace). SIGTERM or SIGINT stop it
gracefully: requests in flight finish first (up to --grace).`

type serveOptions struct {
	host    string
	port    int
	unix    string
	keys    []string
	keyFile string
	keyFD   int
	// insecure: serve TCP without a key (--insecure-no-auth).
	insecure       bool
	allowedHosts   []string
	allowedOrigins []string
	// oldOrigins: --allow-origin, the deprecated spelling.
	oldOrigins []string
	grace      time.Duration
	// hostSet, portSet: --host or --port was given (with --unix: serve
	// TCP as well).
	hostSet, portSet bool
	// daemon: serve as 'agentkernel daemon' (daemon_linux.go): the API
	// on a unix socket (and TCP at tcp when set), the run socket, a pid
	// file.
	daemon bool
	tcp    string
	// backend: -B, the default backend of requests that name none
	// (else [sandbox] backend).
	backend string
}

func newServeCmd(a *App) *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--host 127.0.0.1] [--port 18888] [--unix PATH] [--api-key-file FILE]",
		Short: "Serve the HTTP API (SDKs, plugins) and MCP over HTTP",
		Long:  serveLong,
		Example: `  agentkernel serve                                   # 127.0.0.1:18888, key in <data-dir>/api-key
  AGENTKERNEL_API_KEY=secret agentkernel serve --port 8080
  agentkernel serve --host 0.0.0.0 --api-key-file /etc/agentkernel/keys --allowed-host devbox.lan
  agentkernel serve --unix $XDG_RUNTIME_DIR/agentkernel.sock    # no key for your own user
  agentkernel serve --allowed-origin http://localhost:3000   # a web app of yours may call it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.hostSet, o.portSet = cmd.Flags().Changed("host"), cmd.Flags().Changed("port")
			if cmd.Flags().Changed("allow-origin") {
				a.Warnf("--allow-origin is the former name of --allowed-origin: use that")
			}
			o.allowedOrigins = append(o.allowedOrigins, o.oldOrigins...)
			return a.runServe(cmd.Context(), &o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.host, "host", "127.0.0.1", "address (or name) to listen on over TCP")
	fs.IntVarP(&o.port, "port", "p", 18888, "TCP port to listen on (0: any free port)")
	fs.StringVar(&o.unix, "unix", "", "serve on this unix socket (mode 0600; your user needs no key) instead of TCP, or as well with --host/--port")
	fs.StringArrayVar(&o.keys, "api-key", nil, "accept this API key (repeatable; visible to other users in ps: prefer --api-key-file)")
	fs.StringVar(&o.keyFile, "api-key-file", "", "accept the API keys in this regular file, one per line (at most 64 KiB)")
	fs.IntVar(&o.keyFD, "api-key-fd", 0, "read the API keys from this inherited descriptor")
	fs.BoolVar(&o.insecure, "insecure-no-auth", false, "serve TCP without an API key: anyone who can connect runs commands (throwaway machines only)")
	fs.StringArrayVar(&o.allowedHosts, "allowed-host", nil, "also answer requests whose Host is NAME (repeatable; \"*\": any name)")
	fs.StringArrayVar(&o.allowedOrigins, "allowed-origin", nil, "let web pages of this origin (scheme://host[:port]) call the API, with CORS (repeatable)")
	fs.StringArrayVar(&o.oldOrigins, "allow-origin", nil, "the former name of --allowed-origin")
	_ = fs.MarkHidden("allow-origin")
	fs.StringVarP(&o.backend, "backend", "B", "", "the backend of requests that name none: native, gvisor, docker, podman, auto, or nomad (sandboxes as Nomad jobs, [orchestrator] of your configuration: docs/nomad.md); default: [sandbox] backend of the configuration")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "how long requests in flight may finish on shutdown")
	fs.BoolVar(&o.daemon, "daemon", false, "serve as the background daemon ('agentkernel daemon start')")
	fs.StringVar(&o.tcp, "tcp", "", "with --daemon: also serve the HTTP API on this TCP address")
	_ = fs.MarkHidden("daemon")
	_ = fs.MarkHidden("tcp")
	_ = fs.MarkHidden("api-key-fd")
	return cmd
}

// trusted reports whether the server may use key's value in cfg: not
// when it comes from a project's own agentkernel.toml (the server's
// working directory, possibly a repository just cloned), which must not
// choose the key the server accepts nor open the API to other hosts or
// web pages; that value is ignored with a warning. The user config, a
// file given with --config, flags and the environment are the user's.
func (a *App) trusted(cfg *config.Config, key string) bool {
	src := cfg.Source(key)
	if src.Kind != config.SourceProject || a.ConfigPath != "" {
		return true
	}
	a.Warnf("%s: [api] %s is ignored: a project's agentkernel.toml cannot choose the API's keys, open it to other hosts or web pages, or let it exec as root (use the flag, your user config or --config)", src, strings.TrimPrefix(key, "api."))
	return false
}

// trustedAPI is cfg's [api] with every setting that trusted refuses
// replaced by the user config's own value (the project file's replaced
// it when both set it).
func (a *App) trustedAPI(cfg *config.Config) (config.API, error) {
	out := cfg.API
	var user *config.Config
	// The settings that decide who may use the API and for what: the keys
	// it accepts, the Host names and web pages it answers, exec as root.
	for _, key := range []string{"api.api_key", "api.api_key_env", "api.allowed_hosts", "api.allowed_origins", "api.allow_sudo_exec"} {
		if a.trusted(cfg, key) {
			continue
		}
		if user == nil {
			// The user file was read (and its warnings printed) once
			// already.
			u, _, err := config.LoadUser(config.LoadOptions{})
			if err != nil {
				return config.API{}, &ExitError{Code: ExitAgentkernel, Err: err, Hint: "fix the file, or see 'agentkernel init' for a commented example"}
			}
			user = u
		}
		switch key {
		case "api.api_key":
			out.APIKey = user.API.APIKey
		case "api.api_key_env":
			out.APIKeyEnv = user.API.APIKeyEnv
		case "api.allowed_hosts":
			out.AllowedHosts = user.API.AllowedHosts
		case "api.allowed_origins":
			out.AllowedOrigins = user.API.AllowedOrigins
		case "api.allow_sudo_exec":
			out.AllowSudoExec = user.API.AllowSudoExec
		}
	}
	return out, nil
}

// apiAccess is the Host and Origin allow lists of a server: the flags,
// and [api] allowed_hosts / allowed_origins of api (as trustedAPI let
// them through).
func (a *App) apiAccess(api config.API, hosts, origins []string) (outHosts, outOrigins []string, err error) {
	for _, h := range hosts {
		n, err := config.NormalizeAllowedHost(h)
		if err != nil {
			return nil, nil, fmt.Errorf("--allowed-host: %w", err)
		}
		outHosts = append(outHosts, n)
	}
	for _, o := range origins {
		n, err := config.NormalizeOrigin(o)
		if err != nil {
			return nil, nil, fmt.Errorf("--allowed-origin: %w", err)
		}
		outOrigins = append(outOrigins, n)
	}
	return append(outHosts, api.AllowedHosts...), append(outOrigins, api.AllowedOrigins...), nil
}

// serverKeys are the keys a server (or 'daemon start' for its daemon)
// uses: those given, else <data-dir>/api-key when a TCP listener needs
// one. With --insecure-no-auth a TCP server takes none; without a TCP
// listener the flag changes nothing (the unix socket never asks the
// server's own user for a key), which is said.
func (a *App) serverKeys(ks keySources, api config.API, tcp, insecure bool) ([]string, error) {
	if insecure && (len(ks.keys) > 0 || ks.keyFile != "") {
		return nil, usageError("--insecure-no-auth and --api-key/--api-key-file contradict each other: choose one")
	}
	if insecure && !tcp {
		a.Warnf("--insecure-no-auth has no effect without a TCP listener: the unix socket serves your user without a key and refuses other users")
	}
	keys, from, err := a.apiKeys(ks, api)
	if err != nil {
		return nil, err
	}
	if insecure && tcp {
		if len(keys) > 0 {
			a.Warnf("--insecure-no-auth: the key from %s is not used", from)
		}
		return nil, nil
	}
	if len(keys) == 0 && tcp {
		if keys, err = a.dataDirKey(); err != nil {
			return nil, &ExitError{Code: ExitAgentkernel, Err: err}
		}
	}
	return keys, nil
}

func (a *App) runServe(ctx context.Context, o *serveOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cwd, err := os.Getwd()
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	cfg, err := a.LoadConfig(cwd)
	if err != nil {
		return err
	}
	// [sandbox] backend = "kubernetes": agentkernel-kube serves it.
	if a.Serve == nil && !o.daemon && IsKubernetes(cfg.Sandbox.Backend) {
		return kubeServeHandOff()
	}
	if o.daemon && o.unix != "" {
		return usageError("--unix: the daemon's socket is <data-dir>/daemon/api.sock")
	}
	// TCP: the daemon's --tcp; otherwise always, unless --unix alone.
	tcp := o.tcp != ""
	if !o.daemon {
		tcp = o.unix == "" || o.hostSet || o.portSet
	}
	apiCfg, err := a.trustedAPI(cfg)
	if err != nil {
		return err
	}
	hosts, origins, err := a.apiAccess(apiCfg, o.allowedHosts, o.allowedOrigins)
	if err != nil {
		return usageError("%v", err)
	}
	keys, err := a.serverKeys(keySources{keys: o.keys, keyFile: o.keyFile, keyFD: o.keyFD}, apiCfg, tcp, o.insecure)
	if err != nil {
		return err
	}
	tcpAddr := net.JoinHostPort(o.host, strconv.Itoa(o.port))
	if o.daemon {
		tcpAddr = o.tcp
	}
	// A --host given as a name is a name of this server.
	if h, _, err := net.SplitHostPort(tcpAddr); err == nil && h != "" && net.ParseIP(h) == nil {
		if n, err := config.NormalizeAllowedHost(h); err == nil {
			hosts = append(hosts, n)
		}
	}
	var (
		m    *sandbox.Manager
		done func()
	)
	if a.Serve != nil {
		m, done, err = a.Serve.Sandboxes(a)
	} else {
		m, done, err = a.serveManager()
	}
	if err != nil {
		return err
	}
	defer done()
	var lns []net.Listener
	closeAll := func() {
		for _, l := range lns {
			l.Close()
		}
	}
	var daemonDone func(*api.Server) func()
	if o.daemon {
		lns, daemonDone, err = a.daemonListen(ctx, o)
		if err != nil {
			return err
		}
	} else {
		if o.unix != "" {
			uln, err := listenUnixSocket(o.unix)
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("--unix: %w", err)}
			}
			lns = append(lns, uln)
		}
		if tcp {
			tln, err := net.Listen("tcp", tcpAddr)
			if err != nil {
				closeAll()
				return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "is another server on that port? --port picks another"}
			}
			lns = append(lns, tln)
		}
	}
	// The access log goes to stderr at info level whatever --log-level
	// says (--quiet silences it).
	var accessLog *slog.Logger
	if a.Quiet {
		accessLog = slog.New(slog.DiscardHandler)
	} else {
		accessLog = slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	home, _ := os.UserHomeDir()
	// [sandbox] backend is the default of requests that name none.
	defBackend := cfg.Sandbox.Backend
	if o.backend != "" {
		defBackend = o.backend
	}
	if defBackend == "" {
		defBackend = "native"
	}
	if a.Serve != nil {
		defBackend = a.Serve.Name
	}
	// "auto" stays a name: the Manager picks for each request's spec.
	if err := m.Known(defBackend); err != nil {
		closeAll()
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("[sandbox] backend %q: %w", defBackend, err), Hint: "'agentkernel doctor' says which backends work here; or remove the key"}
	}
	// A backend that reads configuration of its own (nomad's
	// [orchestrator]) is checked now, not at the first request.
	if b, err := m.Backend(defBackend); err == nil {
		if p, ok := b.(interface {
			Probe(context.Context) (string, error)
		}); ok {
			line, err := p.Probe(ctx)
			if err != nil {
				closeAll()
				return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "see docs/nomad.md for [orchestrator]"}
			}
			a.Infof("backend %s: %s", defBackend, line)
		}
	}
	doctorFn := a.apiDoctor(cfg.Security.AllowDegraded, m, defBackend)
	if a.Serve != nil && a.Serve.Doctor != nil {
		doctorFn = a.Serve.Doctor
	}
	mcpServer := mcp.NewServer(mcp.Options{
		Manager:    m,
		Backend:    defBackend,
		LoadConfig: func(string) (*config.Config, error) { return cfg, nil },
		Dir:        cwd,
		// The server's own configuration, never a requested cwd's.
		AllowedDirs: cfg.MCP.AllowedDirs,
		HomeDir:     home,
		DataDir:     a.DataDir,
		Version:     a.Version.Version,
		Logger:      a.Logger,
		Warn:        a.Warnf,
		// The [secrets] bindings of the server's own configuration.
		ServerSecrets: a.serverSecrets,
	})
	srv := api.New(api.Options{
		Manager:        m,
		Resolve:        a.apiResolver(cfg, cwd),
		Keys:           keys,
		InsecureNoAuth: o.insecure,
		AllowedHosts:   hosts,
		AllowedOrigins: origins,
		AllowSudoExec:  apiCfg.AllowSudoExec,
		Version:        a.Version.Version,
		Backend:        defBackend,
		Logger:         accessLog,
		MCP:            mcp.Handler(mcpServer, a.Logger),
		Doctor:         doctorFn,
		// Warm pools for fast runs: [daemon] min_warm / max_warm; the
		// default image's pool is filled at start only when min_warm is set.
		Pool: api.PoolOptions{MinWarm: int(cfg.Daemon.MinWarm), MaxWarm: int(cfg.Daemon.MaxWarm),
			Prewarm: cfg.IsSet("daemon.min_warm") && cfg.Daemon.MinWarm > 0},
	})
	if tcp && o.insecure {
		// Loud on every start, --quiet or not.
		fmt.Fprintf(a.Stderr, "agentkernel: WARNING: --insecure-no-auth: the HTTP API on %s runs commands for anyone who can connect to it, other users of this machine included, with no key; use it only on a throwaway machine (web pages are still refused by the Host, Origin and Content-Type checks)\n", tcpAddr)
	} else if tcp {
		a.Infof("API key authentication enabled over TCP (%d key(s))", len(keys))
	}
	if len(origins) > 0 {
		a.Infof("web pages of %s may call the API (CORS)", strings.Join(origins, ", "))
	}
	if daemonDone != nil {
		defer daemonDone(srv)()
	} else {
		for _, l := range lns {
			if l.Addr().Network() != "unix" {
				a.Infof("agentkernel API listening on http://%s", l.Addr())
			}
		}
		// The socket's line last: a client that waits for it knows every
		// listener is open.
		if o.unix != "" {
			a.Infof("agentkernel API serving unix socket %s (your user only, no key needed)", o.unix)
		}
	}
	if err := srv.Serve(ctx, lns, o.grace); err != nil && !errors.Is(err, net.ErrClosed) {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return nil
}

// ServeBackend is a backend that serve's sandboxes live on in place of
// this machine's: the binary that links it (agentkernel-kube) sets
// App.Serve, and serve takes its Manager and its GET /doctor from here.
type ServeBackend struct {
	// Name is the backend's name: every request's default.
	Name string
	// Sandboxes is the Manager of serve's runs and persistent sandboxes
	// (after the flags and configuration are read), and what to call
	// when serve ends.
	Sandboxes func(a *App) (*sandbox.Manager, func(), error)
	// Doctor answers GET /doctor; nil: this machine's checks.
	Doctor func(r *http.Request) any
}

// IsKubernetes reports whether a backend name is the kubernetes
// backend's ("kubernetes" or "k8s").
func IsKubernetes(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	return n == "kubernetes" || n == "k8s"
}

// kubeServeHandOff replaces this process with agentkernel-kube and the
// same command line: serve with [sandbox] backend = "kubernetes" is
// agentkernel-kube's, which links the cluster's client. It returns only
// when that fails.
func kubeServeHandOff() error {
	kube, err := fullbin.KubePath()
	if err == nil {
		err = syscall.Exec(kube, os.Args, os.Environ())
		err = fmt.Errorf("starting %s: %w", kube, err)
	}
	return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("[sandbox] backend = \"kubernetes\": %w", err),
		Hint: "agentkernel-kube is built with agentkernel: go build -o bin/ ./cmd/..."}
}

// apiResolver turns an API request into a Spec the way 'agentkernel run'
// and 'sandbox create' do: detection and policy with the server's working
// directory and configuration.
func (a *App) apiResolver(cfg *config.Config, cwd string) func(context.Context, api.RunSpec) (*sandbox.Spec, error) {
	home, _ := os.UserHomeDir()
	return func(ctx context.Context, r api.RunSpec) (*sandbox.Spec, error) {
		o := policy.Overrides{Name: r.Name, Image: r.Image, Profile: r.Profile, Network: r.Network,
			AllowDomains: r.AllowDomains, BlockDomains: r.BlockDomains, Publish: r.Ports}
		if r.VCPUs > 0 {
			o.CPUs = float64(r.VCPUs)
		}
		if r.MemoryMB > 0 {
			o.Memory = strconv.Itoa(r.MemoryMB) + "m"
		}
		det := detect.Image(detect.Input{ExplicitImage: r.Image, ConfigImage: cfg.Sandbox.BaseImage,
			ConfigRuntime: cfg.Sandbox.Runtime, Args: r.Args, Dir: cwd})
		spec, warnings, err := policy.Resolve(policy.Input{Config: cfg, Overrides: o, Args: r.Args, Cwd: cwd,
			HomeDir: home, HostEnv: os.LookupEnv, Detected: det, CacheRoot: a.CacheRoot(), DataDir: a.DataDir})
		if err != nil {
			return nil, err
		}
		for _, w := range warnings {
			a.Logger.Warn(w)
		}
		if w, err := policy.CheckEgress(spec, r.Network != "" || cfg.IsSet("security.network")); err != nil {
			return nil, err
		} else if w != "" {
			a.Logger.Warn(w)
		}
		// A backend with loopback only takes a profile's default egress
		// as loopback and refuses an explicit request, as run does.
		o.Set = map[string]bool{"network": r.Network != "", "allow-domain": len(r.AllowDomains) > 0, "block-domain": len(r.BlockDomains) > 0}
		if err := a.CheckBackendEgress(r.Backend, spec, cfg, &o); err != nil {
			return nil, err
		}
		// The same parsing, checks and vault lookup as 'run -S' and
		// 'sandbox create -S', with the [secrets] bindings of the server's
		// own configuration (never a project file's).
		if r.Name != "" {
			err = a.BindSandboxSecrets(ctx, r.Secrets, cfg, spec)
		} else {
			err = a.BindSecrets(ctx, r.Secrets, cfg, spec)
		}
		if err != nil {
			return nil, err
		}
		return spec, nil
	}
}
