//go:build linux

package attack

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/api"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/daemon"
	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// Roles of this test binary in TestKeylessSocketsFromSandbox (values of
// envInner).
const (
	innerSockets = "sockets"        // the rootless user's server and sandboxes
	innerClient  = "sockets-client" // the client, in a sandbox or on the host
)

// Environment of the client.
const (
	envClientDir   = "ATTACK_SOCKET_DIR"   // where api.sock and run.sock are
	envClientBuild = "ATTACK_SOCKET_BUILD" // the run socket's build id
)

// apiKey is the key of the test's API server.
const apiKey = "attack-key"

// TestKeylessSocketsFromSandbox: a rootless sandbox whose workspace
// holds the API's unix socket (`serve --unix ./api.sock` in the project
// directory) and the daemon's run socket must not get the keyless access
// the socket's owner has, although its user namespace maps its ids to
// the owner's uid (SO_PEERCRED reports the owner's uid for it). The
// attack, from inside: GET /status without a key, and a run through the
// run socket. Positive controls: the same client on the host, as the
// same user, gets in without a key; from inside, the API answers 200
// with the key (the socket is reachable, the refusal is the server's).
func TestKeylessSocketsFromSandbox(t *testing.T) {
	switch os.Getenv(envInner) {
	case innerClient:
		socketClient()
		return
	case innerSockets:
		keylessSockets(t)
		return
	case "":
	default:
		t.Skip("inner process of another test")
	}
	if os.Geteuid() != 0 {
		keylessSockets(t)
		return
	}
	// As root: the same test as a user of its own (rootless sandboxes).
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "setpriv (util-linux) not found")
	}
	u, err := user.Lookup(rootlessUser)
	if err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", rootlessUser).CombinedOutput(); err != nil {
			testenv.Missing(t, "useradd %s: %v %s", rootlessUser, err, out)
		}
		u, err = user.Lookup(rootlessUser)
		must(t, err)
	}
	dir, err := os.MkdirTemp("", "attack-sockets-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o777))
	self, err := os.Executable()
	must(t, err)
	b, err := os.ReadFile(self)
	must(t, err)
	bin := filepath.Join(dir, "attack.test")
	must(t, os.WriteFile(bin, b, 0o755))
	cmd := exec.Command(setpriv, "--reuid="+u.Uid, "--regid="+u.Gid, "--clear-groups", "--pdeathsig=SIGKILL",
		bin, "-test.run=^TestKeylessSocketsFromSandbox$", "-test.v", "-test.timeout=300s")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir,
		envInner + "=" + innerSockets, testenv.StrictEnv + "=" + os.Getenv(testenv.StrictEnv)}
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "_test.go") || strings.Contains(l, "panic") || strings.HasPrefix(strings.TrimSpace(l), "--- ") {
			t.Log(rootlessUser + ": " + strings.TrimSpace(l))
		}
	}
	if err != nil {
		t.Errorf("as %s: %v\n%s", rootlessUser, err, lastLines(string(out), 40))
	}
}

// keylessSockets is the test as an unprivileged user: the servers, the
// control on the host, the attack from rootless sandboxes.
func keylessSockets(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Fatal("keylessSockets must run unprivileged")
	}
	ws, err := os.MkdirTemp("", "attack-ws-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(ws) })
	must(t, os.Chmod(ws, 0o755))
	self, err := os.Executable()
	must(t, err)
	b, err := os.ReadFile(self)
	must(t, err)
	client := filepath.Join(ws, "client")
	must(t, os.WriteFile(client, b, 0o755))

	// The API server, as `serve --unix ./api.sock` with a key.
	ln, err := net.Listen("unix", filepath.Join(ws, "api.sock"))
	must(t, err)
	srv := api.New(api.Options{Manager: sandbox.NewManager(sandbox.ManagerOptions{}), Keys: []string{apiKey}, Version: "attack"})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, []net.Listener{ln}, time.Second) }()
	// The daemon's run socket; its runs only count.
	rl, err := daemon.Listen(filepath.Join(ws, "run.sock"))
	must(t, err)
	build := daemon.BuildID()
	var runs atomic.Int32
	runServed := make(chan struct{})
	go func() {
		daemon.Serve(ctx, rl, daemon.Handler{Build: build,
			Run: func(context.Context, *sandbox.Spec, sandbox.Stdio, <-chan os.Signal, func(string)) (sandbox.Result, string, error) {
				runs.Add(1)
				return sandbox.Result{}, "hit", nil
			}})
		close(runServed)
	}()
	t.Cleanup(func() {
		cancel()
		<-runServed
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	env := []string{envInner + "=" + innerClient, envClientBuild + "=" + build}

	// Positive control: the client on the host, as the same user.
	host := exec.Command(client, "-test.run=^TestKeylessSocketsFromSandbox$")
	host.Env = append(env, envClientDir+"="+ws)
	out, _ := host.CombinedOutput()
	ctrl, ok := clientResult(string(out))
	if !ok || ctrl != "api=200/200 run=ok" {
		t.Fatalf("control: the client on the host, same user: %q, want api=200/200 run=ok (the attack is broken)\n%s", ctrl, lastLines(string(out), 20))
	}
	if runs.Load() != 1 {
		t.Fatalf("control: the host client's run reached the handler %d times, want 1", runs.Load())
	}

	// The attack: the same client in rootless sandboxes whose workspace
	// is the directory holding the sockets.
	// The sockets are the target, not limits: a rootless user without a
	// delegated cgroup runs without them (as the battery does).
	bk := native.New(native.Options{DataDir: filepath.Join(ws, ".data"),
		AllowDegraded: func() []string { return []string{config.DegradeCgroups} }})
	defer bk.Drain()
	// Each mounts the project directory read-write at /workspace.
	for _, c := range []struct{ name, profile, mode string }{
		{"permissive", "permissive", ""},
		{"claude mode (moderate)", "", "claude"},
		{"codex mode (restrictive)", "", "codex"},
	} {
		spec, _, err := policy.Resolve(policy.Input{
			Overrides: policy.Overrides{Profile: c.profile, Mode: c.mode, Image: "host", NoNetwork: true, Hostname: "attack",
				Env: append(env, envClientDir+"="+policy.WorkspaceDir)},
			Args:    []string{policy.WorkspaceDir + "/client", "-test.run=^TestKeylessSocketsFromSandbox$"},
			Cwd:     ws,
			HomeDir: ws,
			HostEnv: func(string) (string, bool) { return "", false },
		})
		must(t, err)
		spec.Rootfs = cache.Rootfs{Ref: "host", Host: true}
		spec.Resources.Timeout = time.Minute
		// The client's output goes to a file: its descriptor is the
		// sandbox's stdout and stderr.
		outf, err := os.CreateTemp(ws, "out-")
		must(t, err)
		res, err := bk.Run(context.Background(), spec, sandbox.Stdio{Stdout: outf, Stderr: outf})
		outf.Close()
		if err != nil {
			testenv.Missing(t, "a rootless sandbox (%s): %v", c.name, err)
		}
		outb, err := os.ReadFile(outf.Name())
		must(t, err)
		got, ok := clientResult(string(outb))
		switch {
		case !ok:
			t.Errorf("%s: the client in the sandbox reported nothing (exit %d):\n%s", c.name, res.ExitCode, lastLines(string(outb), 20))
		case strings.HasPrefix(got, "api=200/"):
			t.Errorf("%s: a sandboxed process used the API socket without a key: %s", c.name, got)
		case !strings.HasPrefix(got, "api=403/200 "):
			// The workspace is the host directory itself: the socket
			// must be reachable (200 with the key), or this proves
			// nothing.
			t.Errorf("%s: %s, want api=403/200 (refused without the key, served with it)", c.name, got)
		}
		if strings.Contains(got, "run=ok") || runs.Load() != 1 {
			t.Errorf("%s: a sandboxed process ran a command through the daemon's run socket: %s", c.name, got)
		} else if !strings.Contains(got, "own user and PID namespaces") {
			t.Errorf("%s: the run socket's refusal does not say why: %s", c.name, got)
		}
		t.Logf("%s: %s", c.name, got)
	}
}

// socketClient is the client: GET /status on the API socket without and
// with the key, then a run through the run socket; it prints one line,
// "RESULT api=<no key>/<key> run=<ok or the error>".
func socketClient() {
	dir := os.Getenv(envClientDir)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return net.Dial("unix", filepath.Join(dir, "api.sock"))
		}}}
	var codes []string
	for _, auth := range []string{"", "Bearer " + apiKey} {
		req, _ := http.NewRequest("GET", "http://agentkernel/status", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			codes = append(codes, "unreachable("+err.Error()+")")
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, fmt.Sprint(resp.StatusCode))
	}
	run := "ok"
	c := daemon.NewClient(filepath.Join(dir, "run.sock"))
	c.Build = os.Getenv(envClientBuild)
	if _, err := c.Run(&sandbox.Spec{Args: []string{"true"}}, os.Stdin, os.Stdout, os.Stderr); err != nil {
		run = err.Error()
	}
	c.Close()
	fmt.Printf("RESULT api=%s run=%s\n", strings.Join(codes, "/"), run)
}

// clientResult finds the client's RESULT line in its output.
func clientResult(out string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		if r, ok := strings.CutPrefix(l, "RESULT "); ok {
			return r, true
		}
	}
	return "", false
}
