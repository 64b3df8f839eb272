package cli

import (
	"bufio"
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

API keys: --api-key (repeatable) and --api-key-file (one per line) first;
if none, $AGENTKERNEL_API_KEY; else [api] api_key_env / api_key in
agentkernel.toml. With a key set, every request but GET /health needs
'Authorization: Bearer <key>'. Without one, anyone who can reach the
address can run commands: keep the default 127.0.0.1.

The server's working directory is the project directory of its sandboxes
(agentkernel.toml, image detection, /workspace). SIGTERM or SIGINT stop it
gracefully: requests in flight finish first (up to --grace).`

type serveOptions struct {
	host    string
	port    int
	keys    []string
	keyFile string
	grace   time.Duration
	// daemon: serve as 'agentkernel daemon' (daemon_linux.go): the API
	// on a unix socket (and TCP at tcp when set), the run socket, a pid
	// file.
	daemon bool
	tcp    string
}

func newServeCmd(a *App) *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--host 127.0.0.1] [--port 18888] [--api-key KEY]...",
		Short: "Serve the HTTP API (SDKs, plugins) and MCP over HTTP",
		Long:  serveLong,
		Example: `  agentkernel serve
  AGENTKERNEL_API_KEY=secret agentkernel serve --port 8080
  agentkernel serve --host 0.0.0.0 --api-key-file /etc/agentkernel/keys`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runServe(cmd.Context(), &o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVarP(&o.port, "port", "p", 18888, "TCP port to listen on (0: any free port)")
	fs.StringArrayVar(&o.keys, "api-key", nil, "accept this API key (repeatable)")
	fs.StringVar(&o.keyFile, "api-key-file", "", "accept the API keys in this file, one per line")
	fs.DurationVar(&o.grace, "grace", 30*time.Second, "how long requests in flight may finish on shutdown")
	fs.BoolVar(&o.daemon, "daemon", false, "serve as the background daemon ('agentkernel daemon start')")
	fs.StringVar(&o.tcp, "tcp", "", "with --daemon: also serve the HTTP API on this TCP address")
	_ = fs.MarkHidden("daemon")
	_ = fs.MarkHidden("tcp")
	return cmd
}

// apiKeys collects the keys by precedence: flags and key file, else the
// environment, else the config file.
func apiKeys(o *serveOptions, cfg *config.Config) ([]string, error) {
	var keys []string
	for _, k := range o.keys {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	if o.keyFile != "" {
		f, err := os.Open(o.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--api-key-file: %w", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k := strings.TrimSpace(sc.Text()); k != "" && !strings.HasPrefix(k, "#") {
				keys = append(keys, k)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--api-key-file: %w", err)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("--api-key-file %s holds no key", o.keyFile)
		}
	}
	if len(keys) > 0 {
		return keys, nil
	}
	if k := strings.TrimSpace(os.Getenv("AGENTKERNEL_API_KEY")); k != "" {
		return []string{k}, nil
	}
	if cfg.API.APIKeyEnv != "" {
		if k := strings.TrimSpace(os.Getenv(cfg.API.APIKeyEnv)); k != "" {
			return []string{k}, nil
		}
	}
	if k := strings.TrimSpace(cfg.API.APIKey); k != "" {
		return []string{k}, nil
	}
	return nil, nil
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
	keys, err := apiKeys(o, cfg)
	if err != nil {
		return usageError("%v", err)
	}
	m, done, err := a.serveManager()
	if err != nil {
		return err
	}
	defer done()
	var ln net.Listener
	var daemonDone func(*api.Server) func()
	if o.daemon {
		ln, daemonDone, err = a.daemonListen(ctx, o)
		if err != nil {
			return err
		}
	} else {
		ln, err = net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
		if err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "is another server on that port? --port picks another"}
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
		Manager:       m,
		Resolve:       a.apiResolver(cfg, cwd),
		Keys:          keys,
		AllowSudoExec: cfg.API.AllowSudoExec,
		Version:       a.Version.Version,
		Backend:       "native",
		Logger:        accessLog,
		MCP:           mcp.Handler(mcpServer, a.Logger),
		// Warm pools for fast runs: [daemon] min_warm / max_warm; the
		// default image's pool is filled at start only when min_warm is set.
		Pool: api.PoolOptions{MinWarm: int(cfg.Daemon.MinWarm), MaxWarm: int(cfg.Daemon.MaxWarm),
			Prewarm: cfg.IsSet("daemon.min_warm") && cfg.Daemon.MinWarm > 0},
	})
	if len(keys) > 0 {
		a.Infof("API key authentication enabled (%d key(s))", len(keys))
	} else if host := o.host; host != "127.0.0.1" && host != "localhost" && host != "::1" {
		a.Warnf("no API key set and listening on %s: anyone who can reach it can run commands", host)
	}
	if daemonDone != nil {
		defer daemonDone(srv)()
	} else {
		a.Infof("agentkernel API listening on http://%s", ln.Addr())
	}
	if err := srv.Serve(ctx, ln, o.grace); err != nil && !errors.Is(err, net.ErrClosed) {
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
