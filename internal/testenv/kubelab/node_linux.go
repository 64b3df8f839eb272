//go:build linux

package kubelab

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// NodeName is the name the lab's node registers under.
const NodeName = "kubelab-node"

// PauseImage is the sandbox ("pause") image containerd is configured
// with; StartNode's caller supplies it among the images.
const PauseImage = "agentkernel.test/pause:1"

// NodeMissingHint says how to get what a node needs.
const NodeMissingHint = "a node needs kubelet, kube-scheduler and the CNI plugins (scripts/kube.sh builds them) and containerd, runc and ctr (apt-get install -y containerd runc)"

// nodeTools are the host commands a node runs.
var nodeTools = [...]string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "mount", "ip", "nsenter"}

// NodeReady reports whether everything a node needs is there: kubelet,
// kube-scheduler and the CNI plugins in bin (scripts/kube.sh), and
// containerd, runc and ctr on PATH. missing names what is not.
func NodeReady(bin string) (missing []string) {
	for _, b := range []string{"kubelet", "kube-scheduler", "cni/bridge", "cni/host-local", "cni/loopback"} {
		if st, err := os.Stat(filepath.Join(bin, b)); err != nil || st.Mode()&0o111 == 0 {
			missing = append(missing, filepath.Join(bin, b))
		}
	}
	for _, t := range nodeTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	return missing
}

// Node is one Kubernetes node beside the lab's API server: containerd
// (with runc and the CNI bridge plugin) and a kubelet, plus a
// kube-scheduler to put pods on it. Everything it makes lives under its
// directory, in a mount namespace of its own (the host sees none of its
// mounts), in a cgroup tree of its own, and on a network bridge of its
// own with no address on the host: Close removes them all.
type Node struct {
	lab    *Lab
	dir    string
	cgroup string // the cgroup name under every hierarchy: kubelet's cgroupRoot
	bridge string
	ip     net.IP
	sock   string
	node   *exec.Cmd // sh → containerd, kubelet, in the node's mount namespace
	sched  *exec.Cmd
	// kubeletPort is where the kubelet serves, on ip.
	kubeletPort int

	worldMu sync.Mutex
	world   *World // the running world, if any (StartWorld)
}

// The pods' network: PodSubnet on the node's bridge, no address of the
// host on it. A pod's only route out of it is WorldNet via WorldGateway,
// an address host-local never hands out and nothing holds unless a test
// starts a world (StartWorld): without one, nothing there answers.
const (
	PodSubnet    = "10.244.0.0/24"
	WorldGateway = "10.244.0.254"
	WorldNet     = "198.18.0.0/15"
)

// cniConfig is the node's CNI network: the bridge plugin on the node's
// bridge, which (isGateway false) takes no address on it and routes
// nothing, and host-local addresses from PodSubnet up to the one before
// WorldGateway, with one route, to WorldNet via WorldGateway.
func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{"cniVersion":"0.4.0","name":"kubelab","plugins":[
{"type":"bridge","bridge":%q,"isGateway":false,"ipMasq":false,"hairpinMode":false,
 "ipam":{"type":"host-local","ranges":[[{"subnet":%q,"rangeEnd":"10.244.0.253","gateway":%q}]],
  "routes":[{"dst":%q,"gw":%q}],"dataDir":%q}},
{"type":"loopback"}]}
`, n.bridge, PodSubnet, WorldGateway, WorldNet, WorldGateway, filepath.Join(n.dir, "cni-ipam"))
}

// writeImages writes images (reference → image) into dir as
// docker-archive tars, for `ctr images import`.
func writeImages(dir string, images map[string]v1.Image) error {
	refs := make([]string, 0, len(images))
	for r := range images {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	for i, r := range refs {
		tag, err := name.NewTag(r)
		if err != nil {
			return fmt.Errorf("image %q: %w", r, err)
		}
		if err := tarball.WriteToFile(filepath.Join(dir, fmt.Sprintf("%d.tar", i)), tag, images[r]); err != nil {
			return fmt.Errorf("image %q: %w", r, err)
		}
	}
	return nil
}

// importLoop imports every tar of "$IMG" into containerd's k8s.io
// namespace (the kubelet's).
const importLoop = `for t in "$IMG"/*.tar; do
  ctr --address "$D/containerd.sock" -n k8s.io images import "$t" >/dev/null
done
`

// importScript runs importLoop from the node's cgroup.
const importScript = `set -eu
for c in /sys/fs/cgroup/*/; do
  if [ -d "$c$CG/node" ]; then echo $$ > "$c$CG/node/cgroup.procs"; fi
done
` + importLoop

// Import adds images (reference → image) to the running node's
// containerd store as StartNode does at start: written as tars, imported
// with ctr in the node's mount namespace and cgroup. Pods may then use
// them (with imagePullPolicy Never or IfNotPresent).
func (n *Node) Import(ctx context.Context, images map[string]v1.Image) error {
	if n.node == nil || n.node.Process == nil || n.node.ProcessState != nil {
		return errors.New("import: the node is not running")
	}
	if len(images) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp(filepath.Join(n.dir, "images"), "import-")
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := writeImages(dir, images); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	// The node's start-up shell has become the kubelet: its mount
	// namespace is the node's.
	cmd := exec.CommandContext(ctx, "nsenter", "--mount=/proc/"+strconv.Itoa(n.node.Process.Pid)+"/ns/mnt", "--", "/bin/sh", "-c", importScript)
	cmd.Env = append(os.Environ(), "D="+n.dir, "IMG="+dir, "CG="+n.cgroup)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("import: ctr images import: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// StartNode starts a node with images (reference → image) in its
// containerd store, PauseImage among them, under dir (which must exist
// and be private, with a short path: containerd's socket lives there),
// and waits until it is Ready. Close stops it.
func (l *Lab) StartNode(ctx context.Context, bin, dir string, images map[string]v1.Image) (*Node, error) {
	if m := NodeReady(bin); len(m) > 0 {
		return nil, fmt.Errorf("missing %s: %s", strings.Join(m, ", "), NodeMissingHint)
	}
	if _, ok := images[PauseImage]; !ok {
		return nil, fmt.Errorf("StartNode: images must include %s", PauseImage)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	id := hex.EncodeToString(rnd[:4])
	n := &Node{lab: l, dir: dir, cgroup: "agentkernel-kubelab-" + id, bridge: "akl" + id, sock: filepath.Join(dir, "containerd.sock"),
		// The node's address (a kubelet refuses a loopback one): on its
		// own bridge, from the benchmarking range 198.18.0.0/15, as a
		// /32, so that no route reaches the pods' subnet from the host.
		ip: net.IPv4(198, 18+rnd[4]&1, rnd[5], 1+rnd[4]>>1&0x7f)}
	ok := false
	defer func() {
		if !ok {
			n.Close()
		}
	}()
	p := func(s string) string { return filepath.Join(dir, s) }
	for _, d := range []string{"images", "cni-conf", "cni-ipam", "kubelet", "kubelet-pki", "pod-logs", "volume-plugins", "sysctl"} {
		if err := os.Mkdir(p(d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := n.makeCgroups(); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"link", "add", n.bridge, "type", "bridge"},
		{"addr", "add", n.ip.String() + "/32", "dev", n.bridge},
		{"link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	if err := writeImages(p("images"), images); err != nil {
		return nil, err
	}
	// The kubelet's serving certificate (the API server dials it for
	// exec) and its credentials.
	crt, key, err := l.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: NodeName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{n.ip}, DNSNames: []string{NodeName},
	})
	if err != nil {
		return nil, err
	}
	kubeletKC, err := l.Kubeconfig("kubelet.kubeconfig", l.nodeToken, "default")
	if err != nil {
		return nil, err
	}
	schedKC, err := l.Kubeconfig("scheduler.kubeconfig", l.schedulerToken, "default")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	n.kubeletPort = ports[0]
	files := map[string]string{
		"kubelet.crt":                  string(crt),
		"kubelet.key":                  string(key),
		"containerd.toml":              n.containerdConfig(bin),
		"cni-conf/10-kubelab.conflist": n.cniConfig(),
		"kubelet.yaml":                 n.kubeletConfig(ports[0]),
	}
	// The values the kubelet insists on for these kernel settings,
	// shown to it (in its mount namespace only) in place of the host's,
	// which it would otherwise overwrite: the host's stay as they are.
	sysctls := map[string]string{
		"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10",
		"kernel/panic_on_oops": "1", "kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
	}
	var binds []string
	for k, v := range sysctls {
		f := "sysctl/" + strings.ReplaceAll(k, "/", "_")
		files[f] = v + "\n"
		binds = append(binds, fmt.Sprintf("mount --bind %s /proc/sys/%s", p(f), k))
	}
	sort.Strings(binds)
	for f, b := range files {
		if err := os.WriteFile(p(f), []byte(b), 0o600); err != nil {
			return nil, err
		}
	}
	script := `set -eu
for c in /sys/fs/cgroup/*/; do
  if [ -d "$c$CG/node" ]; then echo $$ > "$c$CG/node/cgroup.procs"; fi
done
mount --make-rprivate /
` + strings.Join(binds, "\n") + `
# The node's own /run, /var/lib and /var/log: shim sockets, the CNI
# cache and the kubelet's /var/log/containers land there, and vanish
# with the namespace.
mount -t tmpfs -o mode=0755 node-run /run
mount -t tmpfs -o mode=0755 node-lib /var/lib
mount -t tmpfs -o mode=0755 node-log /var/log
containerd --config "$D/containerd.toml" >"$D/containerd.log" 2>&1 &
i=0
until ctr --address "$D/containerd.sock" version >/dev/null 2>&1; do
  i=$((i+1)); [ $i -lt 600 ] || { echo "containerd did not start" >&2; exit 1; }
  sleep 0.1
done
IMG="$D/images"
` + importLoop + `exec "$BIN/kubelet" --config="$D/kubelet.yaml" --kubeconfig="` + kubeletKC + `" \
  --root-dir="$D/kubelet" --cert-dir="$D/kubelet-pki" \
  --hostname-override=` + NodeName + ` --node-ip=` + n.ip.String() + ` --v=1
`
	if err := os.WriteFile(p("node.sh"), []byte(script), 0o600); err != nil {
		return nil, err
	}
	log, err := os.Create(p("kubelet.log"))
	if err != nil {
		return nil, err
	}
	n.node = exec.Command("/bin/sh", p("node.sh"))
	n.node.Env = append(os.Environ(), "D="+dir, "BIN="+bin, "CG="+n.cgroup)
	n.node.Stdout, n.node.Stderr = log, log
	n.node.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Cloneflags: syscall.CLONE_NEWNS}
	err = n.node.Start()
	log.Close()
	if err != nil {
		return nil, fmt.Errorf("start node: %w", err)
	}
	slog, err := os.Create(p("scheduler.log"))
	if err != nil {
		return nil, err
	}
	n.sched = exec.Command(filepath.Join(bin, "kube-scheduler"), "--kubeconfig="+schedKC,
		"--authentication-kubeconfig="+schedKC, "--authorization-kubeconfig="+schedKC,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0", "--v=0")
	n.sched.Stdout, n.sched.Stderr = slog, slog
	n.sched.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	err = n.sched.Start()
	slog.Close()
	if err != nil {
		return nil, fmt.Errorf("start kube-scheduler: %w", err)
	}
	if err := n.waitReady(ctx, 4*time.Minute); err != nil {
		return nil, err
	}
	ok = true
	return n, nil
}

// Log returns the tail of one of the node's logs: "kubelet.log" (with
// the start-up script's errors), "containerd.log", "scheduler.log".
func (n *Node) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(n.dir, name))
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

func (n *Node) containerdConfig(bin string) string {
	p := func(s string) string { return filepath.Join(n.dir, s) }
	return fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # Pods' oom_score_adj no lower than containerd's own: lowering one
  # needs CAP_SYS_RESOURCE, which a root without it (in a container)
  # lacks, and runc fails the container.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, p("containerd/root"), p("containerd/state"), n.sock, p("containerd/opt"), PauseImage, p("runc"), filepath.Join(bin, "cni"), p("cni-conf"))
}

func (n *Node) kubeletConfig(port int) string {
	p := func(s string) string { return filepath.Join(n.dir, s) }
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
tlsCertFile: %s
tlsPrivateKeyFile: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
protectKernelDefaults: true
# No iptables chains (KUBE-FIREWALL, the canaries) in the host's network
# namespace, which the node shares.
makeIPTablesUtilChains: false
podLogsDir: %s
volumePluginDir: %s
resolvConf: ""
evictionHard: {memory.available: "50Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
maxPods: 30
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
`, n.cgroup, n.sock, n.ip, port, p("kubelet.crt"), p("kubelet.key"), filepath.Join(n.lab.dir, "ca.crt"), p("pod-logs"), p("volume-plugins"))
}

// hierarchies are the cgroup v1 (and hybrid v2) mounts under
// /sys/fs/cgroup, each once.
func hierarchies() []string {
	ents, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink != 0 || !e.IsDir() {
			continue
		}
		h := filepath.Join("/sys/fs/cgroup", e.Name())
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err == nil {
			out = append(out, h)
		}
	}
	return out
}

// makeCgroups makes n.cgroup (the kubelet's cgroupRoot) and its "node"
// child (for containerd and the kubelet themselves) in every hierarchy.
func (n *Node) makeCgroups() error {
	for _, h := range hierarchies() {
		for _, d := range []string{n.cgroup, n.cgroup + "/node"} {
			if err := os.Mkdir(filepath.Join(h, d), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("cgroup: %w", err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					b, err := os.ReadFile(filepath.Join(h, f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(h, d, f), b, 0o644); err != nil {
						return fmt.Errorf("cgroup %s: %w", f, err)
					}
				}
			}
		}
	}
	return nil
}

// cgroupDirs lists every directory of n.cgroup's tree in h, deepest
// first.
func (n *Node) cgroupDirs(h string) []string {
	var dirs []string
	_ = filepath.WalkDir(filepath.Join(h, n.cgroup), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	return dirs
}

// killAll kills every process in n.cgroup's tree (the freezer holds
// them still meanwhile, so none forks away) until none is left.
func (n *Node) killAll() {
	freezer := filepath.Join("/sys/fs/cgroup/freezer", n.cgroup)
	_, ferr := os.Stat(freezer)
	for i := 0; i < 100; i++ {
		if ferr == nil {
			_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("FROZEN"), 0o644)
		}
		found := false
		for _, h := range hierarchies() {
			for _, d := range n.cgroupDirs(h) {
				b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
						found = true
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
		}
		if ferr == nil {
			_ = os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("THAWED"), 0o644)
		}
		if !found {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close stops the node and removes what it made outside its directory:
// its processes (all of its cgroup tree), its cgroups, its bridge, and
// its Node object. Its mounts went with its mount namespace. The caller
// removes the directory.
func (n *Node) Close() {
	n.worldMu.Lock()
	w := n.world
	n.worldMu.Unlock()
	if w != nil {
		w.Close()
	}
	if n.sched != nil && n.sched.Process != nil {
		_ = syscall.Kill(-n.sched.Process.Pid, syscall.SIGKILL)
		_ = n.sched.Wait()
	}
	if n.node != nil && n.node.Process != nil {
		_ = syscall.Kill(-n.node.Process.Pid, syscall.SIGKILL)
	}
	n.killAll()
	if n.node != nil && n.node.Process != nil {
		_ = n.node.Wait()
	}
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
	for _, h := range hierarchies() {
		for _, d := range n.cgroupDirs(h) {
			for i := 0; i < 50; i++ {
				if err := syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	req, _ := http.NewRequest("DELETE", n.lab.URL+"/api/v1/nodes/"+NodeName, nil)
	req.Header.Set("Authorization", "Bearer "+n.lab.AdminToken)
	if resp, err := n.lab.HTTPClient().Do(req); err == nil {
		resp.Body.Close()
	}
}

// Leftovers names what Close should have removed and did not: cgroups,
// the bridge, mounts under the node's directory. Tests check it is empty.
func (n *Node) Leftovers() []string {
	var out []string
	for _, h := range hierarchies() {
		if _, err := os.Stat(filepath.Join(h, n.cgroup)); err == nil {
			out = append(out, "cgroup "+filepath.Join(h, n.cgroup))
		}
	}
	for _, l := range []string{n.bridge, n.worldLink()} {
		if _, err := net.InterfaceByName(l); err == nil {
			out = append(out, "link "+l)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], n.dir) {
				out = append(out, "mount "+f[4])
			}
		}
	}
	return out
}

func (n *Node) waitReady(ctx context.Context, limit time.Duration) error {
	c := n.lab.HTTPClient()
	deadline := time.Now().Add(limit)
	last := "not registered"
	for {
		if n.node.ProcessState != nil || syscall.Kill(n.node.Process.Pid, 0) != nil {
			return fmt.Errorf("the node exited: %s\ncontainerd: %s", n.Log("kubelet.log"), n.Log("containerd.log"))
		}
		if n.sched.ProcessState != nil || syscall.Kill(n.sched.Process.Pid, 0) != nil {
			return fmt.Errorf("kube-scheduler exited: %s", n.Log("scheduler.log"))
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", n.lab.URL+"/api/v1/nodes/"+NodeName, nil)
		req.Header.Set("Authorization", "Bearer "+n.lab.AdminToken)
		if resp, err := c.Do(req); err == nil {
			var node struct {
				Status struct {
					Conditions []struct{ Type, Status, Reason, Message string }
				}
			}
			if resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&node) == nil {
				for _, cond := range node.Status.Conditions {
					if cond.Type == "Ready" {
						if cond.Status == "True" {
							resp.Body.Close()
							return nil
						}
						last = cond.Reason + ": " + cond.Message
					}
				}
			}
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node not Ready after %s (%s): %s\ncontainerd: %s", limit, last, n.Log("kubelet.log"), n.Log("containerd.log"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
