package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
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
'Authorization: Bearer <key>'. Keys come from --api-key-file (one per
line) and --api-key, else $AGENTKERNEL_API_KEY, else [api] api_key_env /
api_key in
agentkernel.toml. With none of those, the key in <data-dir>/api-key is
used, made (32 random bytes, mode 0600) on the first start; the server
says where it is:
  export AGENTKERNEL_API_KEY="$(cat ~/.local/share/agentkernel/api-key)"
--api-key KEY works too, but other users of the machine can read a
command line (ps): prefer the file or the variable. On the unix socket
your own user needs no key and other users are refused, whatever the
socket file's mode. --insecure-no-auth serves TCP without a key, with a
warning on every start: anyone who can connect to the port, other users
of this machine included, can then run commands.

Web pages. A page in your browser can send requests to 127.0.0.1, so
every request is checked before anything else: its Host must name this
server (localhost, *.localhost, a loopback address, the address it
listens on, a --host name, or --allowed-host NAME; "*" allows any), which
stops DNS rebinding; a request carrying an Origin header (browsers send
one) is refused unless --allow-origin lets that origin in, with CORS
answers; a request body must be Content-Type: application/json, which
HTML forms and simple cross-site requests cannot send. Refusals answer
403 or 415 and are logged. --allowed-host and --allow-origin also come
from [api] allowed_hosts / allowed_origins in your user config
(~/.config/agentkernel/config.toml) or a --config file; a project's own
agentkernel.toml cannot set them.

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
	insecure     bool
	allowedHosts []string
	allowOrigins []string
	grace        time.Duration
	// hostSet, portSet: --host or --port was given (with --unix: serve
	// TCP as well).
	hostSet, portSet bool
	// daemon: serve as 'agentkernel daemon' (daemon_linux.go): the API
	// on a unix socket (and TCP at tcp when set), the run socket, a pid
	// file.
	daemon bool
	tcp    string
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
  agentkernel serve --allow-origin http://localhost:3000     # a web app of yours may call it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.hostSet, o.portSet = cmd.Flags().Changed("host"), cmd.Flags().Changed("port")
			return a.runServe(cmd.Context(), &o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.host, "host", "127.0.0.1", "address (or name) to listen on over TCP")
	fs.IntVarP(&o.port, "port", "p", 18888, "TCP port to listen on (0: any free port)")
	fs.StringVar(&o.unix, "unix", "", "serve on this unix socket (mode 0600; your user needs no key) instead of TCP, or as well with --host/--port")
	fs.StringArrayVar(&o.keys, "api-key", nil, "accept this API key (repeatable; visible to other users in ps: prefer --api-key-file)")
	fs.StringVar(&o.keyFile, "api-key-file", "", "accept the API keys in this file, one per line")
	fs.IntVar(&o.keyFD, "api-key-fd", 0, "read the API keys from this inherited descriptor")
	fs.BoolVar(&o.insecure, "insecure-no-auth", false, "serve TCP without an API key: anyone who can connect runs commands (throwaway machines only)")
	fs.StringArrayVar(&o.allowedHosts, "allowed-host", nil, "also answer requests whose Host is NAME (repeatable; \"*\": any name)")
	fs.StringArrayVar(&o.allowOrigins, "allow-origin", nil, "let web pages of this origin (scheme://host[:port]) call the API, with CORS (repeatable)")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "how long requests in flight may finish on shutdown")
	fs.BoolVar(&o.daemon, "daemon", false, "serve as the background daemon ('agentkernel daemon start')")
	fs.StringVar(&o.tcp, "tcp", "", "with --daemon: also serve the HTTP API on this TCP address")
	_ = fs.MarkHidden("daemon")
	_ = fs.MarkHidden("tcp")
	_ = fs.MarkHidden("api-key-fd")
	return cmd
}

// apiAccess is the Host and Origin allow lists of a server: the flags,
// and [api] allowed_hosts / allowed_origins of the user's config or a
// --config file. A project's own agentkernel.toml (the server's working
// directory, possibly a repository just cloned) may not open the API to
// other names or to web pages: its entries are ignored with a warning.
func (a *App) apiAccess(cfg *config.Config, hosts, origins []string) (outHosts, outOrigins []string, err error) {
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
			return nil, nil, fmt.Errorf("--allow-origin: %w", err)
		}
		outOrigins = append(outOrigins, n)
	}
	trusted := func(key string) bool {
		src := cfg.Source(key)
		if src.Kind == config.SourceProject && a.ConfigPath == "" {
			a.Warnf("%s: [api] %s is ignored: a project's agentkernel.toml cannot open the API to other hosts or web pages (use the flag, your user config or --config)", src, key[len("api."):])
			return false
		}
		return true
	}
	if len(cfg.API.AllowedHosts) > 0 && trusted("api.allowed_hosts") {
		outHosts = append(outHosts, cfg.API.AllowedHosts...)
	}
	if len(cfg.API.AllowedOrigins) > 0 && trusted("api.allowed_origins") {
		outOrigins = append(outOrigins, cfg.API.AllowedOrigins...)
	}
	return outHosts, outOrigins, nil
}

// serverKeys are the keys a server (or 'daemon start' for its daemon)
// uses: those given, else <data-dir>/api-key when a TCP listener needs
// one. With --insecure-no-auth a TCP server takes none.
func (a *App) serverKeys(ks keySources, cfg *config.Config, tcp, insecure bool) ([]string, error) {
	if insecure && (len(ks.keys) > 0 || ks.keyFile != "") {
		return nil, usageError("--insecure-no-auth and --api-key/--api-key-file contradict each other: choose one")
	}
	keys, from, err := a.apiKeys(ks, cfg)
	if err != nil {
		return nil, usageError("%v", err)
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
	if o.daemon && o.unix != "" {
		return usageError("--unix: the daemon's socket is <data-dir>/daemon/api.sock")
	}
	// TCP: the daemon's --tcp; otherwise always, unless --unix alone.
	tcp := o.tcp != ""
	if !o.daemon {
		tcp = o.unix == "" || o.hostSet || o.portSet
	}
	hosts, origins, err := a.apiAccess(cfg, o.allowedHosts, o.allowOrigins)
	if err != nil {
		return usageError("%v", err)
	}
	keys, err := a.serverKeys(keySources{keys: o.keys, keyFile: o.keyFile, keyFD: o.keyFD}, cfg, tcp, o.insecure)
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
	m, done, err := a.serveManager()
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
	mcpServer := mcp.NewServer(mcp.Options{
		Manager:    m,
		LoadConfig: func(dir string) (*config.Config, error) { return a.LoadConfig(dir) },
		Dir:        cwd,
		// The server's own configuration, never a requested cwd's.
		AllowedDirs: cfg.MCP.AllowedDirs,
		HomeDir:     home,
		Version:     a.Version.Version,
		Logger:      a.Logger,
		Warn:        a.Warnf,
	})
	srv := api.New(api.Options{
		Manager:        m,
		Resolve:        a.apiResolver(cfg, cwd),
		Keys:           keys,
		InsecureNoAuth: o.insecure,
		AllowedHosts:   hosts,
		AllowedOrigins: origins,
		AllowSudoExec:  cfg.API.AllowSudoExec,
		Version:        a.Version.Version,
		Backend:        "native",
		Logger:         accessLog,
		MCP:            mcp.Handler(mcpServer, a.Logger),
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

// apiResolver turns an API request into a Spec the way 'agentkernel run'
// and 'sandbox create' do: detection and policy with the server's working
// directory and configuration.
func (a *App) apiResolver(cfg *config.Config, cwd string) func(context.Context, api.RunSpec) (*sandbox.Spec, error) {
	home, _ := os.UserHomeDir()
	return func(_ context.Context, r api.RunSpec) (*sandbox.Spec, error) {
		o := policy.Overrides{Name: r.Name, Image: r.Image, Profile: r.Profile}
		if r.VCPUs > 0 {
			o.CPUs = float64(r.VCPUs)
		}
		if r.MemoryMB > 0 {
			o.Memory = strconv.Itoa(r.MemoryMB) + "m"
		}
		det := detect.Image(detect.Input{ExplicitImage: r.Image, ConfigImage: cfg.Sandbox.BaseImage,
			ConfigRuntime: cfg.Sandbox.Runtime, Args: r.Args, Dir: cwd})
		spec, warnings, err := policy.Resolve(policy.Input{Config: cfg, Overrides: o, Args: r.Args, Cwd: cwd,
			HomeDir: home, HostEnv: os.LookupEnv, Detected: det})
		if err != nil {
			return nil, err
		}
		for _, w := range warnings {
			a.Logger.Warn(w)
		}
		if w, err := policy.NetworkStopgap(spec, cfg.IsSet("security.network")); err != nil {
			return nil, err
		} else if w != "" {
			a.Logger.Warn(w)
		}
		return spec, nil
	}
}
