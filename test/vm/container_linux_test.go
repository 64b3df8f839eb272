//go:build vmguest

package vm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
)

// containerWants is, per configuration of scripts/podmantest.sh
// (AGENTKERNEL_CONTAINER), the isolation doctor must promise root and
// the test user in it, and the protections it must name as refused. The
// checks then hold every probe's verdict to what runs do.
var containerWants = map[string]map[string]struct {
	isolation string
	refused   []string
}{
	// --privileged: root as on the host; the test user has no cgroup
	// delegated to it, so its runs with limits are refused.
	"privileged": {"root": {"full", nil}, "rootless": {"refused", []string{"cgroups"}}},
	// --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add MKNOD
	// --device /dev/net/tun, the
	// cgroup hierarchy remounted read-write by the container's
	// entrypoint: root as on the host. The test user's user namespace
	// may not mount a /proc while podman masks parts of the container's.
	"minimal": {"root": {"full", nil}, "rootless": {"refused", []string{"cgroups"}}},
	// minimal without CAP_MKNOD (podman's default set lacks it) and
	// without the remount: root may not make the sandbox's /dev.
	"nomknod": {"root": {"refused", []string{"cgroups"}}, "rootless": {"refused", []string{"cgroups"}}},
	// minimal without the remount: root's runs with limits are refused
	// until allow_degraded names cgroups, and then go without them.
	"rocgroup": {"root": {"refused", []string{"cgroups"}}, "rootless": {"refused", []string{"cgroups"}}},
	// podman's defaults plus --security-opt unmask=ALL --security-opt
	// seccomp=unconfined: root may not make the namespaces; the test
	// user makes them in its own user namespace and gets a sandbox
	// without cgroup limits where allowed.
	"rootless": {"root": {"refused", []string{"cgroups"}}, "rootless": {"refused", []string{"cgroups"}}},
	// podman's defaults: root may not make the namespaces (no
	// CAP_SYS_ADMIN), the test user may not mount a /proc.
	"default": {"root": {"refused", []string{"cgroups"}}, "rootless": {"refused", []string{"cgroups"}}},
}

// inContainer is root and the test user inside the container, the user
// in the container's own cgroup (nothing delegated).
var inContainer = []user{{name: "root"}, {name: "rootless", rootless: true}}

// TestContainer runs inside one of scripts/podmantest.sh's podman
// containers: doctor --json as root and as the test user, then real runs
// that hold each probe's verdict to what the run does.
func TestContainer(t *testing.T) {
	if os.Getenv("AGENTKERNEL_VM_GUEST") != "container" {
		t.Skip("only inside the containers of scripts/podmantest.sh")
	}
	cfg := os.Getenv("AGENTKERNEL_CONTAINER")
	wants, ok := containerWants[cfg]
	if !ok {
		t.Fatalf("AGENTKERNEL_CONTAINER=%q: not a configuration of scripts/podmantest.sh", cfg)
	}
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "ctr/busybox:1", imagetest.Image(t, imagetest.BusyboxConfig(),
		imagetest.Layer(t, imagetest.BusyboxFiles(t)...),
		imagetest.Layer(t, imagetest.Reg("etc/agentkernel-test", "vm guest\n"))))
	before := cgroupDirs()
	for _, u := range inContainer {
		t.Run(u.name, func(t *testing.T) {
			want := wants[u.name]
			a := newRunner(t, u)
			a.must("-q", "images", "pull", ref)
			rep := a.doctor(t)
			t.Logf("doctor as %s in %s: isolation %s, refused %v: %s", u.name, cfg, rep.Isolation, rep.Refused, rep.Why)
			if _, msg := rep.check("container"); !strings.Contains(msg, "inside a container (podman)") {
				t.Errorf("doctor's container check: %q", msg)
			}
			if rep.Rootless != u.rootless || rep.Isolation != want.isolation || !slices.Equal(rep.Refused, want.refused) {
				t.Errorf("doctor in %s as %s: isolation %q refused %v, want %q %v (%s)", cfg, u.name, rep.Isolation, rep.Refused, want.isolation, want.refused, rep.Why)
			}
			checkVerdicts(t, a, ref, rep)
		})
	}
	// Root's cgroups go below the container's own cgroup, at the root of
	// its mount: nothing but agentkernel's directory is new there, and
	// no sandbox's cgroup is left.
	after := cgroupDirs()
	for _, d := range after {
		if !slices.Contains(before, d) && filepath.Base(d) != "agentkernel" {
			t.Errorf("a cgroup made in the wrong place: %s", d)
		}
	}
	left, _ := filepath.Glob(cgroupRoot + "/*/agentkernel/agentkernel-*")
	if v2, _ := filepath.Glob(cgroupRoot + "/agentkernel/agentkernel-*"); len(v2) > 0 {
		left = append(left, v2...)
	}
	if len(left) > 0 {
		t.Errorf("cgroups left behind: %v", left)
	}
}

// cgroupDirs are the directories one level below each mounted hierarchy
// (v1's /sys/fs/cgroup/CONTROLLER/*, v2's /sys/fs/cgroup/*).
func cgroupDirs() []string {
	var out []string
	for _, pat := range []string{cgroupRoot + "/*/*", cgroupRoot + "/*"} {
		m, _ := filepath.Glob(pat)
		for _, d := range m {
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				out = append(out, d)
			}
		}
	}
	return out
}

// checkVerdicts holds doctor's report rep to what runs do: a check that
// makes every run fail (namespaces, overlayfs, idmapped mounts, seccomp)
// fails them with the same reason; cgroups ok means limits are enforced,
// cgroups refused means runs with limits are refused until
// allow_degraded names them, and then go with one warning; seccomp and
// Landlock ok mean the command runs under both; network egress ok means a
// run with --network full gets its device, missing means such a run
// fails saying why, and rootless means the proxy.
func checkVerdicts(t *testing.T, a *runner, ref string, rep doctorReport) {
	fatal := ""
	for _, n := range []string{"user_namespaces", "namespaces", "overlayfs", "idmapped_mounts", "seccomp"} {
		if st, _ := rep.check(n); st == "error" {
			fatal = n
			break
		}
	}
	if st, _ := rep.check("namespaces"); st == "" {
		t.Fatalf("doctor has no namespaces check: %+v", rep)
	}
	if fatal != "" {
		// No run starts, whatever it asks for, even with every
		// degradation allowed: that is no sandbox.
		a.allowDegraded(t, `"cgroups", "landlock"`)
		res := a.run("run", "--image", ref, "--", "echo", "ran")
		if res.code != 125 || strings.Contains(res.stdout, "ran") {
			t.Fatalf("doctor says %s fails, yet: %v", fatal, res)
		}
		if _, msg := rep.check(fatal); fatal == "namespaces" {
			// The same cause, and the same fix, in both.
			var want []string
			switch {
			case strings.Contains(msg, "bringing lo up"):
				want = []string{"lo up: operation not permitted", "CAP_NET_ADMIN"}
			case strings.Contains(msg, "mounting a /proc"):
				want = []string{"mount proc on /proc: operation not permitted", "unmask=ALL"}
			case strings.Contains(msg, "making the sandbox's device nodes"):
				// PID 1's mknod fails before the run's own code
				// sees it: the run names the capability.
				want = []string{"CAP_MKNOD"}
			case strings.Contains(msg, "setting the host name"):
				want = []string{"sethostname: operation not permitted", "seccomp=unconfined"}
			default:
				want = []string{"creating namespaces: operation not permitted", "CAP_SYS_ADMIN"}
			}
			for _, w := range want {
				if !strings.Contains(res.stderr, w) {
					t.Errorf("doctor's namespaces check says %q; the run does not say %q: %v", msg, w, res)
				}
			}
		}
		return
	}
	cgStatus, _ := rep.check("cgroups")
	switch cgStatus {
	case "ok":
		checkRun(t, a, ref)
		checkMemory(t, a, ref)
		checkPIDs(t, a, ref)
	case "error":
		if !slices.Contains(rep.Refused, "cgroups") {
			t.Fatalf("cgroups error but not refused by the ladder: %+v", rep)
		}
		res := a.run("run", "--image", ref, "--memory", "64m", "--", "echo", "ran")
		if res.code != 125 || strings.Contains(res.stdout, "ran") || !strings.Contains(res.stderr, "allow_degraded") || !strings.Contains(res.stderr, "cgroup") {
			t.Errorf("doctor refuses cgroups, but a run with a memory limit: %v", res)
		}
		a.allowDegraded(t, `"cgroups"`)
		rep2 := a.doctor(t)
		if st, _ := rep2.check("cgroups"); st != "warning" || rep2.Isolation != "degraded" && rep2.Isolation != "refused" {
			t.Errorf("doctor with allow_degraded = [\"cgroups\"]: cgroups %s, isolation %s", st, rep2.Isolation)
		}
		res = a.run("run", "--image", ref, "--memory", "64m", "--", "echo", "ran")
		if res.code != 0 || res.stdout != "ran\n" || strings.Count(res.stderr, "running without cgroup limits") != 1 {
			t.Errorf("allowed to go without cgroups, a run: %v", res)
		}
	default:
		t.Fatalf("doctor's cgroups check: %q", cgStatus)
	}
	if st, _ := rep.check("seccomp"); st == "ok" {
		if lst, _ := rep.check("landlock"); lst == "ok" {
			checkSeccompLandlock(t, a, ref)
		}
	}
	netStatus, netMsg := rep.check("network_egress")
	res := a.run("run", "--image", ref, "--network", "full", "--", "sh", "-c", "env; cat /proc/net/dev")
	switch {
	case netStatus == "ok":
		if res.code != 0 || !strings.Contains(res.stdout, "lo:") || strings.Count(res.stdout, ":") < 2 {
			t.Errorf("doctor says /dev/net/tun opens; a run with --network full: %v", res)
		}
	default:
		// Root or rootless, without a TUN device: proxy mode.
		if res.code != 0 || !strings.Contains(res.stdout, "HTTP_PROXY=") || !strings.Contains(res.stderr, "HTTP proxy") {
			t.Errorf("doctor says %q; a run with --network full gets no proxy: %v", netMsg, res)
		}
	}
}

// allowDegraded writes [security] allow_degraded = [names] into the
// user's own configuration file (trusted configuration).
func (r *runner) allowDegraded(t *testing.T, names string) {
	t.Helper()
	dir := filepath.Join(r.home, ".config", "agentkernel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(p, []byte("[security]\nallow_degraded = ["+names+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r.u.rootless {
		for _, d := range []string{filepath.Join(r.home, ".config"), dir, p} {
			if err := os.Chown(d, testUID, testUID); err != nil {
				t.Fatal(err)
			}
		}
	}
}
