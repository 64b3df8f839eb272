package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/api"
	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/daemon"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const daemonLong = `Run the agentkernel server in the background, for this user and data
directory, with warm pools of prepared sandboxes.

'agentkernel run' uses a running daemon automatically: the sandbox comes
ready from the pool (namespaces, cgroup, root filesystem, /workspace and
seccomp filter all set up ahead), the command runs in it with your
terminal's stdin, stdout, stderr and signals, and the sandbox is discarded
afterwards, as with every run. Without a daemon, run builds the sandbox
itself; the output and the exit status are the same either way.

A pool is kept per sandbox spec (image, profile, mode, mounts, limits,
environment: everything but the command), created by the first run of a
spec and grown with the load, between [daemon] min_warm (default 1) and
max_warm (default 8) sandboxes; 'daemon prewarm' fills one ahead of time
and keeps it. Other pools go after 10 minutes without a run. The gvisor,
docker and podman backends have pools of their own, which 'run -B' of that
backend and the API's fast runs naming it take ('daemon prewarm -B docker'
fills one); such a run that finds its pool empty builds its own sandbox, as
without a daemon, while the pool fills.

The daemon also serves the HTTP API (as 'agentkernel serve') on a unix
socket under the data directory (daemon/api.sock, mode 0600: your user,
no key; other users are refused), and on TCP with --tcp, where every
request needs an API key as with 'serve' (--api-key-file,
$AGENTKERNEL_API_KEY, [api] api_key_env / api_key of your user config,
else <data-dir>/api-key, made on first use). Keys reach the daemon
through an inherited pipe, never its command line or its environment.
Its log is daemon/daemon.log under the data directory; a log over 10 MiB when the
daemon starts is kept as daemon.log.1 and a new one begun. Pools shrink
back towards min_warm after a minute without a run they could not serve.`

// daemonLogMax is the size past which 'daemon start' rotates the log.
var daemonLogMax int64 = 10 << 20

// daemonCommands is 'agentkernel daemon start|stop|status|prewarm'.
func daemonCommands(a *App) []*cobra.Command {
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run a background server with warm sandboxes that 'run' uses",
		Long:  daemonLong,
		Example: `  agentkernel daemon start
  agentkernel daemon prewarm --mode claude --count 4
  agentkernel run -- echo fast            # served from the warm pool
  agentkernel daemon status
  agentkernel daemon stop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDaemonStartCmd(a), newDaemonStopCmd(a), newDaemonStatusCmd(a), newDaemonPrewarmCmd(a))
	return []*cobra.Command{cmd}
}

// daemonStartOptions are 'daemon start's flags.
type daemonStartOptions struct {
	tcp          string
	keys         []string
	keyFile      string
	insecure     bool
	allowedHosts []string
	allowOrigins []string
	oldOrigins   []string // --allow-origin, the deprecated spelling
	wait         time.Duration
}

func newDaemonStartCmd(a *App) *cobra.Command {
	var o daemonStartOptions
	cmd := &cobra.Command{
		Use:   "start [--tcp 127.0.0.1:18888 [--api-key-file FILE]]",
		Short: "Start the daemon in the background",
		Long: `Start the daemon in the background and wait until it answers. Its working
directory, and so the project directory of its HTTP API's sandboxes, is the
current directory; 'agentkernel run' sends its own resolved spec, so runs
are not affected by it.

The HTTP API is on the unix socket <data-dir>/daemon/api.sock for your
user (no key). --tcp also serves it on TCP, where requests need an API key
and are checked as 'agentkernel serve' checks them (Host, Origin,
Content-Type; see 'agentkernel serve --help'). The keys are handed to the
daemon through a pipe: they never appear on its command line.`,
		Example: `  agentkernel daemon start
  agentkernel daemon start --tcp 127.0.0.1:18888            # key in <data-dir>/api-key
  agentkernel daemon start --tcp 127.0.0.1:18888 --api-key-file ~/.config/agentkernel/keys`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("allow-origin") {
				a.Warnf("--allow-origin is the former name of --allowed-origin: use that")
			}
			o.allowOrigins = append(o.allowOrigins, o.oldOrigins...)
			return a.daemonStart(&o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.tcp, "tcp", "", "also serve the HTTP API on this TCP address (host:port; needs an API key)")
	fs.StringArrayVar(&o.keys, "api-key", nil, "API key for --tcp (repeatable; visible to other users in ps: prefer --api-key-file)")
	fs.StringVar(&o.keyFile, "api-key-file", "", "API keys for --tcp in this file, one per line")
	fs.BoolVar(&o.insecure, "insecure-no-auth", false, "serve --tcp without an API key (throwaway machines only; see 'agentkernel serve --help')")
	fs.StringArrayVar(&o.allowedHosts, "allowed-host", nil, "also answer TCP requests whose Host is NAME (repeatable)")
	fs.StringArrayVar(&o.allowOrigins, "allowed-origin", nil, "let web pages of this origin call the API, with CORS (repeatable)")
	fs.StringArrayVar(&o.oldOrigins, "allow-origin", nil, "the former name of --allowed-origin")
	_ = fs.MarkHidden("allow-origin")
	fs.DurationVar(&o.wait, "wait", 15*time.Second, "how long to wait for the daemon to answer")
	return cmd
}

func (a *App) daemonStart(o *daemonStartOptions) error {
	p := daemon.PathsFor(a.DataDir)
	if pid := p.PID(); pid != 0 && daemonAnswers(p) {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("a daemon is already running for %s (pid %d)", a.DataDir, pid),
			Hint: "'agentkernel daemon stop' stops it"}
	}
	tcp, wait := o.tcp, o.wait
	// The keys are resolved here, where the user sees what happens (a
	// key file made, a warning), and handed to the daemon through a pipe.
	cwd, err := os.Getwd()
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	cfg, err := a.LoadConfig(cwd)
	if err != nil {
		return err
	}
	apiCfg, err := a.trustedAPI(cfg)
	if err != nil {
		return err
	}
	if _, _, err := a.apiAccess(apiCfg, o.allowedHosts, o.allowOrigins); err != nil {
		return usageError("%v", err)
	}
	keys, err := a.serverKeys(keySources{keys: o.keys, keyFile: o.keyFile}, apiCfg, tcp != "", o.insecure)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	// One generation of log is kept: a log past daemonLogMax at start
	// becomes daemon.log.1 (replacing the previous one).
	if fi, err := os.Stat(p.Log); err == nil && fi.Size() > daemonLogMax {
		_ = os.Rename(p.Log, p.Log+".1")
	}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	defer logf.Close()
	start, _ := logf.Seek(0, io.SeekEnd)
	exe, err := os.Executable()
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	argv := []string{"--data-dir", filepath.Dir(p.Dir), "--log-level", a.LogLevel}
	if a.ConfigPath != "" {
		argv = append(argv, "--config", a.ConfigPath)
	}
	argv = append(argv, "serve", "--daemon")
	if tcp != "" {
		argv = append(argv, "--tcp", tcp)
	}
	if o.insecure {
		argv = append(argv, "--insecure-no-auth")
	}
	for _, h := range o.allowedHosts {
		argv = append(argv, "--allowed-host", h)
	}
	for _, h := range o.allowOrigins {
		argv = append(argv, "--allowed-origin", h)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	defer devnull.Close()
	c := exec.Command(exe, argv...)
	c.Stdin, c.Stdout, c.Stderr = devnull, logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// The keys travel in the pipe below (or, without a TCP listener, are
	// not needed): the daemon does not inherit the variables that hold
	// them, neither $AGENTKERNEL_API_KEY nor the one [api] api_key_env
	// of the user's config names.
	c.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "AGENTKERNEL_API_KEY" || (apiCfg.APIKeyEnv != "" && name == apiCfg.APIKeyEnv)
	})
	var keyPipe *os.File
	if len(keys) > 0 {
		// Descriptor 3 of the daemon: a pipe that holds the keys, one a
		// line (a pipe's buffer holds far more than any key list).
		pr, pw, err := os.Pipe()
		if err != nil {
			return &ExitError{Code: ExitAgentkernel, Err: err}
		}
		defer pr.Close()
		keyPipe = pw
		c.ExtraFiles = []*os.File{pr}
		c.Args = append(c.Args, "--api-key-fd", "3")
	}
	if err := c.Start(); err != nil {
		if keyPipe != nil {
			keyPipe.Close()
		}
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("starting the daemon: %w", err)}
	}
	if keyPipe != nil {
		_, err := io.WriteString(keyPipe, strings.Join(keys, "\n")+"\n")
		keyPipe.Close()
		if err != nil {
			_ = c.Process.Kill()
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("handing the API keys to the daemon: %w", err)}
		}
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	deadline := time.After(wait)
	for {
		if daemonAnswers(p) {
			break
		}
		select {
		case err := <-exited:
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("the daemon exited at start (%v): %s", err, logTail(p.Log, start)),
				Hint: "its log is " + p.Log}
		case <-deadline:
			_ = c.Process.Kill()
			return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("the daemon did not answer within %s: %s", wait, logTail(p.Log, start)),
				Hint: "its log is " + p.Log}
		case <-time.After(20 * time.Millisecond):
		}
	}
	a.Infof("agentkernel daemon started (pid %d)", c.Process.Pid)
	a.Infof("  HTTP API: unix socket %s%s", p.API, map[bool]string{true: ", http://" + tcp, false: ""}[tcp != ""])
	a.Infof("  'agentkernel run' now uses its warm sandboxes; log: %s", p.Log)
	return nil
}

// logTail is what the daemon logged since offset, on one line.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "no log"
	}
	defer f.Close()
	_, _ = f.Seek(offset, io.SeekStart)
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	s := strings.Join(strings.Fields(string(b)), " ")
	if s == "" {
		return "nothing logged"
	}
	return s
}

// daemonAnswers reports whether the daemon's HTTP API answers /health.
func daemonAnswers(p daemon.Paths) bool {
	c := unixHTTPClient(p.API, time.Second)
	resp, err := c.Get("http://agentkernel/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func unixHTTPClient(sock string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

func newDaemonStopCmd(a *App) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "Stop the daemon (runs in flight finish first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := daemon.PathsFor(a.DataDir)
			pid := p.PID()
			if pid == 0 {
				a.Infof("no agentkernel daemon is running for %s", a.DataDir)
				return nil
			}
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("stopping the daemon (pid %d): %w", pid, err)}
			}
			deadline := time.Now().Add(timeout)
			for syscall.Kill(pid, 0) == nil {
				if time.Now().After(deadline) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					a.Warnf("the daemon did not stop within %s and was killed; 'agentkernel gc' removes what it left", timeout)
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			a.Infof("agentkernel daemon stopped (pid %d)", pid)
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 40*time.Second, "kill the daemon if it has not stopped after this long")
	return cmd
}

// daemonStatus is 'daemon status --json'.
type daemonStatus struct {
	Running  bool             `json:"running"`
	PID      int              `json:"pid,omitempty"`
	API      string           `json:"api_socket,omitempty"`
	Log      string           `json:"log"`
	Uptime   int64            `json:"uptime_seconds,omitempty"`
	Pools    []poolStatus     `json:"pools"`
	PoolRuns map[string]int64 `json:"pool_runs"`
	// StatusError says why the pools and runs are unknown: the daemon
	// answered /health but not GET /status.
	StatusError string `json:"status_error,omitempty"`
}

type poolStatus struct {
	Backend string `json:"backend,omitempty"`
	Image   string `json:"image"`
	Profile string `json:"profile"`
	Mode    string `json:"mode,omitempty"`
	Ready   int64  `json:"ready"`
}

// samePoolBackend reports whether a pool's backend in /status (native
// for the Manager's own; absent from an older daemon) is spec's ("" for
// native).
func samePoolBackend(status, spec string) bool {
	if status == "" || status == "native" {
		return spec == ""
	}
	return status == spec
}

func newDaemonStatusCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--json]",
		Short: "Say whether the daemon runs, and what its pools hold",
		Long:  "Say whether the daemon runs, and what its pools hold. Exit status 0 when it runs, 3 when it does not.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := daemon.PathsFor(a.DataDir)
			st := daemonStatus{Log: p.Log, Pools: []poolStatus{}, PoolRuns: map[string]int64{}}
			if pid := p.PID(); pid != 0 && daemonAnswers(p) {
				st.Running, st.PID, st.API = true, pid, p.API
				if err := readDaemonStatus(p, &st); err != nil {
					st.StatusError = err.Error()
				}
				// The uptime is the daemon process's own, which needs
				// no answer from it (a daemon of an older version, or a
				// busy one, still has one).
				if up, ok := processUptime(pid); ok {
					st.Uptime = int64(up / time.Second)
				}
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(st); err != nil {
					return err
				}
			} else if !st.Running {
				fmt.Fprintf(a.Stdout, "agentkernel daemon: not running (data directory %s)\n", a.DataDir)
			} else {
				fmt.Fprintf(a.Stdout, "agentkernel daemon: running (pid %d, up %s)\n", st.PID, (time.Duration(st.Uptime) * time.Second).String())
				fmt.Fprintf(a.Stdout, "  HTTP API: unix socket %s\n  log: %s\n", st.API, st.Log)
				if st.StatusError != "" {
					fmt.Fprintf(a.Stdout, "  runs served and warm pools: unknown (%s)\n", st.StatusError)
				} else {
					fmt.Fprintf(a.Stdout, "  runs served: %d from a warm sandbox, %d with a fresh one\n", st.PoolRuns["hit"], st.PoolRuns["miss"]+st.PoolRuns["unpoolable"])
				}
				if st.StatusError == "" && len(st.Pools) == 0 {
					fmt.Fprintln(a.Stdout, "  warm pools: none yet (the first run of a spec creates its pool)")
				}
				for _, ps := range st.Pools {
					mode := ps.Mode
					if mode == "" {
						mode = "native"
					}
					on := ""
					if ps.Backend != "" && ps.Backend != "native" {
						on = ", backend " + ps.Backend
					}
					fmt.Fprintf(a.Stdout, "  warm pool: image %s, profile %s, mode %s%s: %d ready\n", ps.Image, ps.Profile, mode, on, ps.Ready)
				}
			}
			if !st.Running {
				return &ExitError{Code: 3}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

// readDaemonStatus fills the pool sizes, run counts and uptime from the
// daemon's GET /status; an error says why it could not.
func readDaemonStatus(p daemon.Paths, st *daemonStatus) error {
	resp, err := unixHTTPClient(p.API, 2*time.Second).Get("http://agentkernel/status")
	if err != nil {
		return fmt.Errorf("GET /status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /status: %s", resp.Status)
	}
	var env struct {
		Data api.Status `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&env); err != nil {
		return fmt.Errorf("GET /status: %w", err)
	}
	st.Uptime = env.Data.UptimeSeconds
	for _, ps := range env.Data.Pools {
		st.Pools = append(st.Pools, poolStatus{Backend: ps.Backend, Image: ps.Image, Profile: ps.Profile, Mode: ps.Mode, Ready: int64(ps.Ready)})
	}
	for k, n := range env.Data.PoolRuns {
		st.PoolRuns[k] = int64(n)
	}
	return nil
}

// userHZ is the unit of the times in /proc/PID/stat (USER_HZ, the same
// on every architecture Linux exposes it to).
const userHZ = 100

// processUptime is how long process pid has run: its start time in
// /proc/PID/stat against the time since boot in /proc/uptime.
func processUptime(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command's name, in parentheses, may hold spaces and ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	// After the name: state (field 3) ... starttime (field 22).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	u, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	fu := strings.Fields(string(u))
	if len(fu) == 0 {
		return 0, false
	}
	since, err := strconv.ParseFloat(fu[0], 64)
	if err != nil {
		return 0, false
	}
	up := time.Duration(since*float64(time.Second)) - time.Duration(start)*time.Second/userHZ
	if up < 0 {
		return 0, false
	}
	return up, true
}

func newDaemonPrewarmCmd(a *App) *cobra.Command {
	var ov policy.Overrides
	var count int
	var backend string
	cmd := &cobra.Command{
		Use:   "prewarm [--mode claude|codex|gemini|native] [-B BACKEND] [run flags] [--count N]",
		Short: "Fill the daemon's pool for the runs of an agent mode or profile",
		Long: `Fill the daemon's pool for the sandbox spec that 'agentkernel run' with the
same flags, in the current directory, would use: after 'daemon prewarm
--mode claude', 'agentkernel run --mode claude -- CMD' here starts from a warm
sandbox. --count is how many to keep ready (default [daemon] min_warm, at most
[daemon] max_warm).

The image is chosen as for a command that implies none: --image, then
agentkernel.toml, then the project files. Commands that pick their own image
(python3 → python:3.12-alpine) get their pool on first use, or name the image
here with --image.

-B gvisor, docker or podman fills that backend's pool instead, which
'agentkernel run -B' of that backend (with the same flags) and the API's
fast runs naming it ("backend": "docker") take: a sandbox booted ahead with
its idle first process, the command run in it as an exec. -B nomad fills a
pool of Nomad jobs, started and answering ahead, for the API's fast runs
naming nomad and for persistent sandboxes of the same spec (docs/nomad.md).`,
		Example: `  agentkernel daemon prewarm --mode claude
  agentkernel daemon prewarm --image python:3.12-alpine -p restrictive --count 4
  agentkernel daemon prewarm -B docker --image alpine:3.20 --count 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ov.Set = runcli.ChangedFlags(cmd.Flags())
			if strings.EqualFold(ov.Mode, "native") {
				ov.Mode = ""
			}
			if count < 0 {
				return usageError("--count must not be negative")
			}
			p := daemon.PathsFor(a.DataDir)
			if p.PID() == 0 {
				return &ExitError{Code: ExitAgentkernel, Err: errors.New("no agentkernel daemon is running"), Hint: "'agentkernel daemon start' starts one"}
			}
			// Resolved as 'run -B' resolves its spec (a backend with
			// loopback only keeps it to loopback), so that its runs
			// find this pool.
			b := strings.ToLower(strings.TrimSpace(backend))
			if b == "native" {
				b = ""
			}
			spec, err := a.ResolveRunSpecFor(&ov, []string{"true"}, b)
			if err != nil {
				return err
			}
			mgr, err := a.Manager()
			if err != nil {
				return err
			}
			if b != "" {
				be, err := mgr.Backend(b)
				if err != nil {
					return usageError("-B: %v", err)
				}
				if _, ok := be.(sandbox.Preparer); !ok {
					return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("backend %s has no warm pools", b), Hint: "use -B native, gvisor, docker, podman or nomad"}
				}
				if c, ok := be.(sandbox.Checker); ok {
					if err := c.Check(spec); err != nil {
						return runcli.RunError(err)
					}
				}
				spec.Backend = b
			}
			remote := false
			if b != "" {
				be, _ := mgr.Backend(b)
				_, remote = be.(sandbox.Remote)
			}
			// A remote backend's nodes fetch the image themselves.
			if !remote {
				if err := mgr.PrepareRootfs(cmd.Context(), spec); err != nil {
					return runcli.RunError(err)
				}
			}
			if err := daemon.Prewarm(p.Run, spec, count); err != nil {
				if errors.Is(err, daemon.ErrStale) {
					return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "restart it: agentkernel daemon stop && agentkernel daemon start"}
				}
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			a.Infof("prewarming: image %s, profile %s%s", spec.Image, spec.Profile, map[bool]string{true: ", mode " + ov.Mode, false: ""}[ov.Mode != ""])
			// The first warm sandbox is waited for (30 s at most), so that
			// the runs that follow start from the pool.
			deadline := time.Now().Add(30 * time.Second)
			for {
				st := daemonStatus{PoolRuns: map[string]int64{}}
				if readDaemonStatus(p, &st) != nil {
					break
				}
				ready := int64(0)
				for _, ps := range st.Pools {
					if ps.Image == spec.Image && ps.Profile == spec.Profile && ps.Mode == spec.Mode && samePoolBackend(ps.Backend, spec.Backend) {
						ready = ps.Ready
					}
				}
				if ready > 0 {
					a.Infof("%d ready", ready)
					break
				}
				if time.Now().After(deadline) || cmdContext(cmd).Err() != nil {
					a.Infof("none ready yet: the pool is still filling ('agentkernel daemon status' shows it)")
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	runcli.BindSpecFlags(fs, &ov)
	fs.IntVar(&count, "count", 0, "sandboxes to keep ready (default [daemon] min_warm)")
	fs.StringVarP(&backend, "backend", "B", "", "the backend whose pool to fill: native (default), gvisor, docker or podman")
	for _, hide := range []string{"tty", "interactive", "keep"} {
		_ = fs.MarkHidden(hide)
	}
	return cmd
}

// daemonListen opens the daemon's sockets for 'serve --daemon': the HTTP
// API on a unix socket (and TCP when asked), the run socket, the pid
// file. done starts the run socket's server for srv and returns what
// stops it and removes the files.
func (a *App) daemonListen(ctx context.Context, o *serveOptions) ([]net.Listener, func(*api.Server) func(), error) {
	p := daemon.PathsFor(a.DataDir)
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	if pid := p.PID(); pid != 0 && pid != os.Getpid() && daemonAnswers(p) {
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("a daemon is already running for %s (pid %d)", a.DataDir, pid)}
	}
	if err := os.WriteFile(p.PIDFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	fail := func(err error) ([]net.Listener, func(*api.Server) func(), error) {
		os.Remove(p.PIDFile)
		return nil, nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	uln, err := listenUnixSocket(p.API)
	if err != nil {
		return fail(err)
	}
	lns := []net.Listener{uln}
	if o.tcp != "" {
		tln, err := net.Listen("tcp", o.tcp)
		if err != nil {
			uln.Close()
			return fail(fmt.Errorf("--tcp %s: %w", o.tcp, err))
		}
		lns = append(lns, tln)
	}
	rln, err := daemon.Listen(p.Run)
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		return fail(err)
	}
	a.Infof("agentkernel daemon (pid %d) serving %s and %s", os.Getpid(), p.API, p.Run)
	build := daemon.BuildID()
	done := func(srv *api.Server) func() {
		rctx, cancel := context.WithCancel(ctx)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			daemon.Serve(rctx, rln, daemon.Handler{Run: srv.RunLocal, Prewarm: srv.Prewarm, Logger: a.Logger, Build: build})
		}()
		return func() {
			cancel()
			<-finished
			os.Remove(p.PIDFile)
		}
	}
	return lns, done, nil
}
