// Package doctor answers "what isolation does a run get on this host, and
// why": one check per capability the native backend uses (asked with the
// backend's own code, so that the verdicts match what a run then does),
// what each enables and, when it is missing, the one command or setting
// that gives it back; then the fallback ladder's verdict for a run.
// `agentkernel doctor`, `status` and `setup` and the HTTP API's
// GET /doctor show it.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/contract"
)

// Status is one check's verdict, as the HTTP API's GET /doctor names
// them.
type Status string

// The statuses. Only StatusError makes a report unhealthy.
const (
	StatusOK      Status = "ok"
	StatusWarning Status = "warning"
	StatusInfo    Status = "info"
	StatusError   Status = "error"
)

// Check is one finding.
type Check struct {
	Name    string `json:"name"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	// Enables is what the capability gives a sandbox.
	Enables string `json:"enables,omitempty"`
	// Fix is the one command or setting that gives it back, when missing.
	Fix string `json:"fix,omitempty"`
}

// Report is the whole answer: the checks, then what a run will use.
type Report struct {
	Checks  []Check `json:"checks"`
	Healthy bool    `json:"healthy"`
	// Backend is the backend runs use ("native").
	Backend string `json:"backend"`
	// Rootless: runs by this user are rootless.
	Rootless bool `json:"rootless"`
	// Isolation is "full", "degraded" (a protection is missing and
	// allow_degraded lets runs go without it) or "refused" (runs with
	// the default profile's limits fail here).
	Isolation string `json:"isolation"`
	// Degraded are the protections runs go without (allowed); Refused
	// those whose absence makes runs that need them fail.
	Degraded []string `json:"degraded,omitempty"`
	Refused  []string `json:"refused,omitempty"`
	// Why says how Isolation was decided.
	Why string `json:"why"`
	// Auto is what the backend name "auto" picks here for a run that
	// every backend could take (filled by the command line, which has
	// the backends).
	Auto *AutoChoice `json:"auto,omitempty"`
	// Contract lists, per backend, the checks of the contract every
	// backend is held to (the attack battery, the file and cp tests, the
	// HTTP API contract) that it is known not to pass as native does,
	// with why (internal/contract; docs/backend-differences.md): no
	// backend is silently weaker.
	Contract []BackendContract `json:"contract"`
}

// AutoChoice is the backend "auto" picks, and why.
type AutoChoice struct {
	Backend string `json:"backend"`
	Why     string `json:"why"`
}

// BackendContract is one backend's known differences from the contract.
type BackendContract struct {
	Backend     string                `json:"backend"`
	Differences []contract.Difference `json:"differences"`
}

// contractReport is every backend's differences, native first.
func contractReport() []BackendContract {
	var out []BackendContract
	for _, b := range contract.All() {
		d := contract.For(b)
		if d == nil {
			d = []contract.Difference{}
		}
		out = append(out, BackendContract{Backend: b, Differences: d})
	}
	return out
}

// Options say whose runs the report is about.
type Options struct {
	// DataDir is agentkernel's data directory (the probe cgroup is named
	// for it, the idmapped-mount probe runs on it).
	DataDir string
	// AllowDegraded is [security] allow_degraded of trusted configuration.
	AllowDegraded []string
	// Tools are the other runtimes looked for; nil: runsc, crun, docker,
	// podman.
	Tools []string
	// ToolTimeout bounds each tool's --version (default 3 s).
	ToolTimeout time.Duration
}

// Run probes the host.
func Run(ctx context.Context, o Options) *Report {
	if o.Tools == nil {
		o.Tools = []string{"runsc", "crun", "docker", "podman"}
	}
	if o.ToolTimeout <= 0 {
		o.ToolTimeout = 3 * time.Second
	}
	rootless := os.Geteuid() != 0
	r := &Report{Backend: "native", Rootless: rootless, Contract: contractReport()}
	// Inside a container the fixes are the container's options.
	ctr := DetectContainer(ContainerSigns{
		DockerEnv:    fileExists("/.dockerenv"),
		ContainerEnv: fileExists("/run/.containerenv"),
		Kubernetes:   os.Getenv("KUBERNETES_SERVICE_HOST") != "" || fileExists("/var/run/secrets/kubernetes.io/serviceaccount"),
		PID1Cgroup:   readTrim("/proc/1/cgroup"),
		PID1Comm:     readTrim("/proc/1/comm"),
	})
	add := func(c Check) { r.Checks = append(r.Checks, c) }
	fatal := map[string]string{} // check → why runs fail
	ladder := func(c *Check, protection string, cause error) {
		_, err := native.Ladder(o.AllowDegraded, protection, cause)
		c.Fix = native.Fix(protection)
		if err != nil {
			c.Status = StatusError
			c.Message += "; runs that need it are refused (allow_degraded does not name " + strconv.Quote(protection) + ")"
			r.Refused = append(r.Refused, protection)
			return
		}
		c.Status = StatusWarning
		c.Message += "; runs go without it, as [security] allow_degraded allows, with one warning each"
		r.Degraded = append(r.Degraded, protection)
	}

	// kernel
	rel := readTrim("/proc/sys/kernel/osrelease")
	kc := Check{Name: "kernel", Enables: "Linux 5.13 or later: every isolation feature used here (overlayfs in user namespaces 5.11, idmapped mounts 5.12, Landlock 5.13)"}
	if runtime.GOOS != "linux" || rel == "" {
		kc.Status, kc.Message = StatusError, "not Linux ("+runtime.GOOS+"): the native backend needs Linux"
		kc.Fix = "run agentkernel on Linux (a VM on other systems)"
		fatal["kernel"] = kc.Message
	} else {
		kc.Message = "Linux " + rel + " (" + runtime.GOARCH + ")"
		if maj, min, ok := ParseKernelVersion(rel); ok && (maj < 5 || maj == 5 && min < 13) {
			kc.Status = StatusWarning
			kc.Message += ": older than 5.13, some protections are missing (see below)"
			kc.Fix = "upgrade to a kernel of 5.13 or later"
		} else {
			kc.Status = StatusOK
		}
	}
	add(kc)
	if runtime.GOOS != "linux" {
		r.finish(fatal)
		return r
	}

	// user namespaces and overlayfs
	uc := Check{Name: "user_namespaces", Enables: "every sandbox: its own root, ids mapped to unprivileged host ids"}
	usernsErr, overlayErr := native.ProbeUserNamespace(ctx)
	sys := ReadUsernsSysctls(readTrim)
	if usernsErr != nil {
		uc.Status, uc.Message = StatusError, "cannot create a user namespace: "+usernsErr.Error()
		uc.Fix = sys.Fix()
		fatal["user_namespaces"] = uc.Message
	} else {
		uc.Status, uc.Message = StatusOK, "a user namespace was made"
		if sys.Max > 0 {
			uc.Message += fmt.Sprintf(" (user.max_user_namespaces %d)", sys.Max)
		}
	}
	add(uc)
	nc := Check{Name: "namespaces", Enables: "every sandbox: its own mounts, processes, network, IPC and host name"}
	nsErr := native.ProbeNamespaces(ctx)
	if nsErr == nil && usernsErr == nil {
		nc.Status, nc.Message = StatusOK, "mount, PID, network, IPC and UTS namespaces were made, lo brought up, a /proc mounted, the host name set (and, as root, a device node made) in them"
		if rootless {
			nc.Message += " inside a user namespace"
		}
	} else if nsErr != nil {
		nc.Status, nc.Message = StatusError, "cannot create the sandbox's namespaces: "+nsErr.Error()
		switch {
		case errors.Is(nsErr, native.ErrLoopbackRefused):
			nc.Fix = "as root, lo up needs CAP_NET_ADMIN: run the container with --cap-add NET_ADMIN, or --privileged; docs/containers.md"
		case errors.Is(nsErr, native.ErrMknodRefused):
			nc.Fix = "as root, the sandbox's /dev needs CAP_MKNOD: run the container with --cap-add MKNOD, or --privileged; docs/containers.md"
		case errors.Is(nsErr, native.ErrHostnameRefused):
			nc.Fix = "the container's seccomp profile refuses sethostname: run the container with --security-opt seccomp=unconfined (or --privileged); docs/containers.md"
		case errors.Is(nsErr, native.ErrProcRefused):
			nc.Fix = "the kernel refuses a new /proc where parts of it are masked, as a container masks them: podman run --security-opt unmask=ALL, docker run --security-opt systempaths=unconfined, or --privileged; docs/containers.md"
		case rootless:
			nc.Fix = sys.Fix()
		case ctr != "":
			nc.Fix = "as root, they need CAP_SYS_ADMIN: run the container with --cap-add SYS_ADMIN (and, where AppArmor is on, --security-opt apparmor=unconfined), or --privileged; docs/containers.md"
		default:
			nc.Fix = "a kernel with CONFIG_NAMESPACES, CONFIG_PID_NS, CONFIG_NET_NS, CONFIG_IPC_NS and CONFIG_UTS_NS; as root, CAP_SYS_ADMIN"
		}
		fatal["namespaces"] = nc.Message
	} else {
		nc.Status, nc.Message = StatusError, "not tried: no user namespace"
		nc.Fix = uc.Fix
	}
	add(nc)
	oc := Check{Name: "overlayfs", Enables: "a writable layer over the image that the host never sees written"}
	where := "in a new mount namespace"
	if rootless {
		where = "inside a user namespace"
	}
	if overlayErr != nil && (usernsErr != nil || nsErr != nil && errors.Is(overlayErr, native.ErrCloneRefused)) {
		// Not an overlayfs matter: the namespaces check says why.
		oc.Status, oc.Message = StatusError, "not tried: the namespace it is mounted in cannot be made (see namespaces)"
		fatal["overlayfs"] = oc.Message
	} else if overlayErr != nil {
		oc.Status, oc.Message = StatusError, "overlayfs "+where+" failed: "+overlayErr.Error()
		oc.Fix = "a kernel with overlayfs (CONFIG_OVERLAY_FS; 5.11 or later for rootless)"
		if rootless && sys.AppArmorRestrict == 1 {
			// The namespace is made but holds no capability.
			oc.Fix = sys.Fix()
		}
		fatal["overlayfs"] = oc.Message
	} else {
		oc.Status, oc.Message = StatusOK, "overlayfs mounted and written "+where
	}
	add(oc)

	// idmapped mounts (root only)
	ic := Check{Name: "idmapped_mounts", Enables: "image layers and volumes shown inside under the sandbox's own block of host ids (root runs)"}
	dir := o.DataDir
	if st, err := os.Stat(dir); dir == "" || err != nil || !st.IsDir() {
		dir = os.TempDir()
	}
	if rl, err := native.ProbeIDMapped(dir); rl {
		ic.Status, ic.Message = StatusInfo, "not used rootless: the sandbox's files are the caller's own"
	} else if err != nil {
		ic.Status, ic.Message = StatusError, "idmapped mount of "+dir+" failed: "+err.Error()
		ic.Fix = "keep the data directory on a filesystem with idmapped mounts (ext4, xfs, btrfs, tmpfs on 6.3+) on Linux 5.12 or later"
		if ctr != "" && errors.Is(err, syscall.EPERM) {
			ic.Fix = "as root, idmapped mounts need CAP_SYS_ADMIN: run the container with --cap-add SYS_ADMIN, or --privileged; docs/containers.md"
		}
		fatal["idmapped_mounts"] = ic.Message
	} else {
		ic.Status, ic.Message = StatusOK, "idmapped mount of "+dir+" made"
	}
	add(ic)

	// cgroups
	cp := native.ProbeCgroups(o.DataDir)
	cc := Check{Name: "cgroups", Enables: "memory, process and CPU limits (the profiles' and --memory/--cpus/--pids)"}
	layout := "cgroup " + cp.Layout
	if cp.Layout == "none" {
		layout = "no cgroup hierarchy"
	}
	switch {
	case cp.Err == nil:
		cc.Status, cc.Message = StatusOK, layout+": a cgroup with memory, pids and CPU limits was made and removed"
		if cp.Rootless && cp.Dir != "" {
			cc.Message += " (delegated: " + cp.Dir + ")"
		}
	case native.NoCgroups(cp.Err):
		cc.Message = layout + ": " + cp.Err.Error()
		if cp.Rootless {
			cc.Message = layout + ": the caller's cgroup subtree is not delegated (" + cp.Err.Error() + ")"
		}
		ladder(&cc, config.DegradeCgroups, cp.Err)
		if ctr != "" && !cp.Rootless {
			cc.Fix = "the container's cgroup hierarchy is read-only: remount it read-write inside the container (which needs CAP_SYS_ADMIN), or run the container with --privileged; docs/containers.md"
		}
	default:
		cc.Status, cc.Message = StatusError, layout+": making a cgroup failed: "+cp.Err.Error()
		cc.Fix = "check the cgroup hierarchy's mount and the kernel's memory, pids and cpu controllers"
		fatal["cgroups"] = cc.Message
	}
	if cp.Controllers != "" {
		cc.Message += "; controllers: " + cp.Controllers
	}
	add(cc)

	// seccomp
	sc := Check{Name: "seccomp", Enables: "the system-call filter of every profile (never degraded)"}
	if err := native.ProbeSeccomp(ctx); err != nil {
		sc.Status, sc.Message = StatusError, "loading a seccomp filter failed: "+err.Error()
		sc.Fix = "a kernel with CONFIG_SECCOMP_FILTER=y"
		fatal["seccomp"] = sc.Message
	} else {
		sc.Status, sc.Message = StatusOK, "a seccomp filter was compiled and loaded"
	}
	add(sc)

	// Landlock
	lc := Check{Name: "landlock", Enables: "the filesystem fence: writes only where the sandbox is meant to write"}
	if abi := native.LandlockABI(); abi >= 1 {
		lc.Status, lc.Message = StatusOK, "Landlock ABI "+strconv.Itoa(abi)
	} else {
		lc.Message = "no Landlock on this kernel"
		ladder(&lc, config.DegradeLandlock, fmt.Errorf("no Landlock on this kernel"))
	}
	add(lc)

	// network egress
	tc := Check{Name: "network_egress", Enables: "--network filtered/full: every TCP and UDP flow through the policy engine (/dev/net/tun)"}
	if err := native.ProbeTUN(); err == nil {
		tc.Status, tc.Message = StatusOK, "/dev/net/tun opens"
	} else if rootless {
		tc.Status, tc.Message = StatusInfo, err.Error()+": rootless runs with egress get an HTTP(S) proxy instead (HTTP_PROXY in the sandbox; other TCP and UDP refused)"
		tc.Fix = "sudo chmod 0666 /dev/net/tun (the usual mode) for full TCP/UDP egress rootless"
	} else {
		tc.Status, tc.Message = StatusInfo, err.Error()+": runs with egress get an HTTP(S) proxy instead (HTTP_PROXY in the sandbox; other TCP and UDP refused)"
		tc.Fix = "sudo modprobe tun, for full TCP/UDP egress"
		if ctr != "" {
			tc.Fix = "run the container with --device /dev/net/tun, for full TCP/UDP egress"
		}
	}
	add(tc)

	// KVM
	kvc := Check{Name: "kvm", Enables: "nothing in this build (microVM backends are not built in); shown for other tools"}
	if api, err := ProbeKVM(); err != nil {
		kvc.Status, kvc.Message = StatusInfo, "/dev/kvm not usable: "+err.Error()
		kvc.Fix = "sudo usermod -aG kvm $USER (and log in again), or enable virtualization"
	} else {
		kvc.Status, kvc.Message = StatusInfo, fmt.Sprintf("/dev/kvm usable: API version %d, a VM was created", api)
	}
	add(kvc)

	// other runtimes
	for _, t := range o.Tools {
		add(toolCheck(ctx, t, o.ToolTimeout))
	}
	add(gvisorCheck(ctx))

	// container
	cn := Check{Name: "container", Status: StatusInfo, Enables: "(information) inside a container the sandbox nests in it: the container's own limits and seccomp profile apply too"}
	if ctr == "" {
		cn.Message = "not inside a container"
	} else {
		cn.Message = "inside a container (" + ctr + ")"
		cn.Fix = "as root: run the container with --privileged, or with --cap-add SYS_ADMIN --cap-add NET_ADMIN --device /dev/net/tun (and --security-opt apparmor=unconfined where AppArmor is on) and its cgroup hierarchy remounted read-write; docs/containers.md"
	}
	add(cn)

	r.finish(fatal)
	return r
}

// finish decides the isolation level and the backend check.
func (r *Report) finish(fatal map[string]string) {
	who := "as root"
	if r.Rootless {
		who = "rootless"
	}
	bc := Check{Name: "backend", Enables: "agentkernel run"}
	switch {
	case len(fatal) > 0:
		// In the checks' order: the first is the cause of the others.
		var names []string
		for _, c := range r.Checks {
			if _, ok := fatal[c.Name]; ok && !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
		var rest []string
		for n := range fatal {
			if !slices.Contains(names, n) {
				rest = append(rest, n)
			}
		}
		slices.Sort(rest)
		names = append(names, rest...)
		r.Isolation = "refused"
		r.Why = "runs fail here: " + fatal[names[0]]
		bc.Status, bc.Message = StatusError, "native, "+who+": no sandbox can start ("+strings.Join(names, ", ")+" missing)"
	case len(r.Refused) > 0:
		r.Isolation = "refused"
		r.Why = "runs that need " + strings.Join(r.Refused, " and ") + " are refused, as the fallback ladder does for anything that weakens isolation; [security] allow_degraded in trusted configuration lets them run without"
		bc.Status, bc.Message = StatusError, "native, "+who+": runs needing "+strings.Join(r.Refused, ", ")+" are refused"
	case len(r.Degraded) > 0:
		r.Isolation = "degraded"
		r.Why = "runs go without " + strings.Join(r.Degraded, " and ") + ", as [security] allow_degraded allows, with one warning per run"
		bc.Status, bc.Message = StatusWarning, "native, "+who+": degraded (without "+strings.Join(r.Degraded, ", ")+")"
	default:
		r.Isolation = "full"
		r.Why = "every protection is available: namespaces, overlayfs, seccomp, Landlock, cgroup limits"
		bc.Status, bc.Message = StatusOK, "native, "+who+": full isolation"
	}
	r.Checks = append(r.Checks, bc)
	r.Healthy = true
	for _, c := range r.Checks {
		if c.Status == StatusError {
			r.Healthy = false
		}
	}
}

// WriteText writes the report for people: one check per line, what it
// enables, the fix of what is missing, then the verdict and the ladder.
func (r *Report) WriteText(w io.Writer) {
	for _, c := range r.Checks {
		fmt.Fprintf(w, "%-8s %-16s %s", c.Status, c.Name, c.Message)
		if c.Enables != "" {
			fmt.Fprintf(w, " [enables: %s]", c.Enables)
		}
		if c.Fix != "" && c.Status != StatusOK {
			fmt.Fprintf(w, " [fix: %s]", c.Fix)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\nrun will use: backend %s, %s, isolation %s\nwhy: %s\n", r.Backend, map[bool]string{true: "rootless", false: "as root"}[r.Rootless], r.Isolation, r.Why)
	fmt.Fprintln(w, "\nbackends: what each is known not to pass of the checks every backend runs (attack battery, file and cp tests, HTTP API contract; docs/backend-differences.md)")
	for _, bc := range r.Contract {
		if len(bc.Differences) == 0 {
			fmt.Fprintf(w, "  %-8s passes every check as native does\n", bc.Backend)
			continue
		}
		fmt.Fprintf(w, "  %-8s %d known differences:\n", bc.Backend, len(bc.Differences))
		for _, d := range bc.Differences {
			where := ""
			if d.Profiles != nil {
				where = " (" + strings.Join(d.Profiles, ", ") + ")"
			}
			fmt.Fprintf(w, "    %s %s%s: %s: %s\n", d.Suite, d.Check, where, d.Want, d.Why)
		}
	}
	fmt.Fprintln(w, "\nfallback ladder: a missing namespace, overlayfs, idmapped mount or seccomp always refuses the run; missing cgroups or Landlock refuse it too unless [security] allow_degraded (your user config or --config) names \"cgroups\" or \"landlock\", then the run goes on with one warning")
}

// ParseKernelVersion reads "6.1.0-18-amd64" as 6, 1.
func ParseKernelVersion(rel string) (major, minor int, ok bool) {
	f := strings.FieldsFunc(rel, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 || !strings.HasPrefix(rel, f[0]) {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(f[0])
	minor, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// UsernsSysctls are the settings that keep users from user namespaces.
type UsernsSysctls struct {
	// UnprivilegedClone is kernel.unprivileged_userns_clone (Debian's,
	// older Ubuntu's): 0 refuses unprivileged callers; -1 absent.
	UnprivilegedClone int
	// Max is user.max_user_namespaces: 0 refuses everyone; -1 absent.
	Max int
	// AppArmorRestrict is kernel.apparmor_restrict_unprivileged_userns
	// (Ubuntu 23.10+): 1 gives unprivileged namespaces no capabilities
	// unless an AppArmor profile allows them; -1 absent.
	AppArmorRestrict int
}

// ReadUsernsSysctls reads them through read (a path → trimmed content,
// "" when absent).
func ReadUsernsSysctls(read func(string) string) UsernsSysctls {
	num := func(p string) int {
		n, err := strconv.Atoi(read(p))
		if err != nil {
			return -1
		}
		return n
	}
	return UsernsSysctls{
		UnprivilegedClone: num("/proc/sys/kernel/unprivileged_userns_clone"),
		Max:               num("/proc/sys/user/max_user_namespaces"),
		AppArmorRestrict:  num("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
	}
}

// Fix is the one setting that lets user namespaces be made.
func (s UsernsSysctls) Fix() string {
	switch {
	case s.Max == 0:
		return "sudo sysctl -w user.max_user_namespaces=15000"
	case s.UnprivilegedClone == 0:
		return "sudo sysctl -w kernel.unprivileged_userns_clone=1"
	case s.AppArmorRestrict == 1:
		return "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile for agentkernel-full with \"userns,\")"
	}
	return "a kernel with CONFIG_USER_NS=y; inside a container, run it with --privileged or a seccomp profile that allows unshare and clone with namespace flags"
}

// ContainerSigns are what tells a container from the inside.
type ContainerSigns struct {
	// DockerEnv: /.dockerenv exists (docker).
	DockerEnv bool
	// ContainerEnv: /run/.containerenv exists (podman, buildah).
	ContainerEnv bool
	// Kubernetes: KUBERNETES_SERVICE_HOST is set or a service account
	// is mounted (every pod has one of them, whatever its runtime).
	Kubernetes bool
	// PID1Cgroup and PID1Comm are /proc/1/cgroup and /proc/1/comm.
	PID1Cgroup, PID1Comm string
}

// DetectContainer says what container this process is in, "" for none.
// Inside a container with a cgroup namespace of its own, PID 1's cgroup
// is "0::/" and says nothing: the files and the pod's environment do.
func DetectContainer(s ContainerSigns) string {
	switch {
	case s.ContainerEnv:
		return "podman"
	case s.DockerEnv:
		return "docker"
	case s.Kubernetes:
		return "kubernetes"
	}
	for _, k := range []struct{ sub, name string }{{"kubepods", "kubernetes"}, {"/docker/", "docker"}, {"docker-", "docker"}, {"libpod", "podman"}, {"/lxc/", "lxc"}, {"containerd", "containerd"}} {
		if strings.Contains(s.PID1Cgroup, k.sub) {
			return k.name
		}
	}
	switch s.PID1Comm {
	case "", "systemd", "init", "launchd":
		return ""
	case "tini", "dumb-init", "catatonit", "docker-init", "conmon":
		return s.PID1Comm + " as PID 1"
	}
	return ""
}

// toolCheck runs name --version with a short timeout.
func toolCheck(ctx context.Context, name string, timeout time.Duration) Check {
	c := Check{Name: name, Status: StatusInfo, Enables: toolEnables(name)}
	p, err := exec.LookPath(name)
	if err != nil {
		c.Message = "not installed"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, "--version")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.Message = p + " does not answer --version: " + err.Error()
		if ctx.Err() != nil {
			c.Message = p + " gave no answer to --version within " + timeout.String()
		}
		return c
	}
	c.Status, c.Message = StatusOK, p+": "+FirstLine(string(out))
	return c
}

// toolEnables says what a tool gives agentkernel: the backend it
// stands behind and what that backend cannot do, or nothing.
func toolEnables(name string) string {
	switch name {
	case "docker", "podman":
		// The backend talks to the engine's API socket, not the CLI: the
		// CLI's presence hints that an engine is there.
		return "-B " + name + " (through the engine's API): runs and persistent sandboxes in its containers; " +
			"not there: network egress and published ports (loopback only), secret injection, the Landlock fence " +
			"(unless [security] allow_degraded names it), disk_mb, snapshots; docs/backends.md"
	case "runsc":
		return "-B gvisor (as root): runs under gVisor's kernel; not there: persistent sandboxes, network egress, " +
			"rootless runs, secret injection; docs/gvisor.md (agentkernel finds runsc through AGENTKERNEL_RUNSC, its cache, or PATH)"
	}
	return "nothing agentkernel needs (the native backend is built in); reported for comparison"
}

// FirstLine is s's first non-empty line, at most 120 bytes.
func FirstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 120 {
				l = l[:120]
			}
			return l
		}
	}
	return ""
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func fileExists(p string) bool {
	_, err := os.Lstat(filepath.Clean(p))
	return err == nil
}

// gvisorCheck says whether -B gvisor can run here, and what it does not
// do that the native backend does: the backend is marked weaker where
// it is, never silently so.
func gvisorCheck(ctx context.Context) Check {
	c := Check{Name: "gvisor", Status: StatusInfo, Enables: "-B gvisor: commands under gVisor's own kernel (runsc), network and persistent sandboxes as native's; optional"}
	d := gvisor.Diagnose(ctx)
	gaps := "; not supported on gvisor: " + strings.Join(gvisor.Gaps(), ", ") + " (use -B native for those)"
	if d.Problem != "" {
		c.Message = "-B gvisor cannot run here: " + d.Problem + gaps
		c.Fix = "scripts/runsc.sh builds the runsc agentkernel is tested with (or set AGENTKERNEL_RUNSC); docs/gvisor.md"
		return c
	}
	c.Status, c.Message = StatusOK, d.Runsc+" ("+d.Version+")"+gaps
	return c
}
