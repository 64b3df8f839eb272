//go:build linux

package nomadlab

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Version is the Nomad version scripts/nomad.sh builds (its
// scripts/nomad/go.mod); the cache directory is named after it.
const Version = "v1.11.2"

// MissingHint says how to get the agent.
const MissingHint = "the Nomad agent is not built: run scripts/nomad.sh (or set AGENTKERNEL_NOMAD_DIR)"

// Binary is the nomad binary: in $AGENTKERNEL_NOMAD_DIR, else in
// scripts/nomad.sh's cache. ok is false when it is missing.
func Binary() (path string, ok bool) {
	dir := os.Getenv("AGENTKERNEL_NOMAD_DIR")
	if dir == "" {
		cache := os.Getenv("AGENTKERNEL_NOMAD_CACHE")
		if cache == "" {
			if os.Geteuid() == 0 {
				cache = "/var/cache/agentkernel"
			} else if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
				cache = filepath.Join(x, "agentkernel")
			} else {
				home, _ := os.UserHomeDir()
				cache = filepath.Join(home, ".cache", "agentkernel")
			}
		}
		dir = filepath.Join(cache, "nomad-"+Version)
	}
	path = filepath.Join(dir, "nomad")
	st, err := os.Stat(path)
	return path, err == nil && st.Mode()&0o111 != 0
}

// Lab is a running dev agent.
type Lab struct {
	Address string // http://127.0.0.1:PORT
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Start runs `nomad agent -dev` under dir (which must exist and be
// private) with raw_exec (and the exec driver, where the machine allows
// it) enabled, and waits until its client node is ready with raw_exec
// healthy. Close stops it.
func Start(ctx context.Context, bin, dir string) (*Lab, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	l := &Lab{Address: "http://127.0.0.1:" + strconv.Itoa(ports[0]), dir: dir, done: make(chan struct{})}
	cfg := fmt.Sprintf(`
bind_addr = "127.0.0.1"
data_dir = %q
log_level = "WARN"
# Loopback only: no update check to checkpoint-api.hashicorp.com.
disable_update_check = true
ports {
  http = %d
  rpc  = %d
  serf = %d
}
addresses {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
client {
  enabled = true
  network_interface = "lo"
  state_dir = %q
  alloc_dir = %q
  # No cloud metadata, Consul or Vault probes: loopback only, and faster.
  options = {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean,consul,vault"
    "driver.denylist"      = "docker,qemu,java"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, filepath.Join(dir, "data"), ports[0], ports[1], ports[2], filepath.Join(dir, "client"), filepath.Join(dir, "alloc"))
	conf := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	l.cmd = exec.Command(bin, "agent", "-dev", "-config="+conf)
	l.cmd.Stdout, l.cmd.Stderr = log, log
	// A mount namespace of its own (private: Go marks / so): the
	// allocation directories' tmpfs mounts, and those of the sandboxes
	// its tasks make, never appear in the host's mount table, where
	// other tests running at the same time compare it.
	l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Unshareflags: syscall.CLONE_NEWNS}
	if err := l.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start nomad: %w", err)
	}
	go func() { _ = l.cmd.Wait(); close(l.done) }()
	if err := l.waitReady(ctx, 2*time.Minute); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Log is the agent's log so far, then the tasks' logs (for failing
// tests).
func (l *Lab) Log() string {
	b, _ := os.ReadFile(filepath.Join(l.dir, "agent.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	logs, _ := filepath.Glob(filepath.Join(l.dir, "alloc", "*", "alloc", "logs", "*"))
	for _, f := range logs {
		// Only the regular files: the log directory holds the tasks'
		// FIFOs too, which an open would wait on.
		if st, err := os.Lstat(f); err != nil || !st.Mode().IsRegular() {
			continue
		}
		t, _ := os.ReadFile(f)
		if len(t) > 2000 {
			t = t[len(t)-2000:]
		}
		b = append(b, "\n--- "+f+":\n"...)
		b = append(b, t...)
	}
	return string(b)
}

type nodeStub struct {
	ID      string
	Status  string
	Drivers map[string]struct{ Detected, Healthy bool }
}

// Nodes lists the client nodes and their drivers' health.
func (l *Lab) nodes(ctx context.Context) ([]nodeStub, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", l.Address+"/v1/nodes?resources=false", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var ns []nodeStub
	if err := json.NewDecoder(resp.Body).Decode(&ns); err != nil {
		return nil, err
	}
	return ns, nil
}

// DriverHealthy reports whether the client node has driver d healthy.
func (l *Lab) DriverHealthy(ctx context.Context, d string) bool {
	ns, err := l.nodes(ctx)
	if err != nil {
		return false
	}
	for _, n := range ns {
		if dr, ok := n.Drivers[d]; ok && dr.Healthy && n.Status == "ready" {
			return true
		}
	}
	return false
}

func (l *Lab) waitReady(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		if l.DriverHealthy(ctx, "raw_exec") {
			return nil
		}
		select {
		case <-l.done:
			return fmt.Errorf("nomad agent exited: %s", l.Log())
		case <-ctx.Done():
			return fmt.Errorf("nomad agent not ready with raw_exec in %s: %s", d, l.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close stops the agent (SIGINT, then SIGKILL of its process group) and
// the tasks it started.
func (l *Lab) Close() {
	if l.cmd == nil || l.cmd.Process == nil {
		return
	}
	_ = l.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
	<-l.done
	l.killExecutors()
	l.unmountAllocs()
}

// unmountAllocs unmounts the tmpfs mounts (secrets, private) that Nomad
// makes in allocation directories and leaves when the agent dies before
// it destroys them, so that the lab's directory can be removed.
func (l *Lab) unmountAllocs() {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], l.dir+"/") {
			_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
		}
	}
}

// killExecutors kills what the agent left running: its task executors
// run in sessions of their own, and name files under the lab's
// directory on their command lines (nothing else does).
func (l *Lab) killExecutors() {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), l.dir+"/") && strings.Contains(string(cmd), "executor") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}
