// Command sandboxbench times `run /bin/true` in a sandbox side by side:
// agentkernel's native backend against bubblewrap, crun and runc (each
// when installed), reports medians, p90s and ratios in one run, then
// podman and docker (each when installed; dockerd is started here when
// none runs) in a second, shorter interleaved run beside the CLI and
// bwrap, then throughput at 2 and 8 concurrent runs and the peak RSS of a
// run. -agentkernel names the agentkernel binary, with agentkernel-full
// beside it.
//
//	CGO_ENABLED=0 go build -o /tmp/sandboxbench ./bench/cmd/sandboxbench && /tmp/sandboxbench -n 200
//
// The "agentkernel (native)" case is this binary re-executed as a minimal
// agentkernel (`sandboxbench run SPEC.json`): native.Backend.Run with
// every fence on, the same init and exec stages as the real CLI, without
// cobra and config loading. When -agentkernel names a built agentkernel
// whose `run` works, that binary is timed too.
package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/backend/native"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func main() {
	if native.IsInit() {
		os.Exit(native.InitMain())
	}
	if len(os.Args) == 3 && os.Args[1] == "run" {
		os.Exit(runOne(os.Args[2]))
	}
	n := flag.Int("n", 100, "timed runs per case")
	ak := flag.String("agentkernel", "", "path of a built agentkernel binary to time as well")
	img := flag.String("image", "", "busybox rootfs directory (built from /bin/busybox when empty)")
	allowCgo := flag.Bool("allow-cgo", false, "time binaries built with cgo (dynamically linked) too; they start slower than the static build agentkernel ships as")
	flag.Parse()
	if !*allowCgo {
		if err := checkStatic(*ak); err != nil {
			fmt.Fprintln(os.Stderr, "sandboxbench:", err)
			os.Exit(2)
		}
	}
	if err := bench(*n, *ak, *img); err != nil {
		fmt.Fprintln(os.Stderr, "sandboxbench:", err)
		os.Exit(1)
	}
}

// checkStatic refuses to time a dynamically linked agentkernel: a Go
// build with cgo on (go's default where a C compiler is installed) links
// libc, and every start then pays the dynamic loader and libc's and
// cgo's set-up (docs/perf-log.md, 2026-11-25 03:58). That is
// not the binary the README builds (CGO_ENABLED=0), so its times would
// not be agentkernel's. This program, which is the "native" case, and
// agentkernel-full (the daemon) are checked too.
func checkStatic(ak string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bins := []string{self}
	if ak != "" {
		bins = append(bins, ak, filepath.Join(filepath.Dir(ak), "agentkernel-full"))
	}
	for _, b := range bins {
		dynamic, err := dynamicallyLinked(b)
		if err != nil {
			return err
		}
		if dynamic {
			return fmt.Errorf("%s is dynamically linked (built with cgo): rebuild it with CGO_ENABLED=0, as the README does, or pass -allow-cgo to time it anyway", b)
		}
	}
	return nil
}

// dynamicallyLinked reports whether the ELF executable at path asks for
// a program interpreter (the dynamic loader).
func dynamicallyLinked(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// spec is the moderate-profile-like Spec every agentkernel case runs.
func spec(rootfs string) *sandbox.Spec {
	return &sandbox.Spec{
		Rootfs:   image.Rootfs{Ref: "busybox", Layers: []string{rootfs}},
		Args:     []string{"/bin/true"},
		Hostname: "sandbox",
		Network:  sandbox.Network{Mode: sandbox.NetworkNone},
		Security: sandbox.Security{
			Capabilities: []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
				"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"},
			Seccomp: sandbox.SeccompDefault, NoNewPrivs: true, Landlock: true,
		},
	}
}

func runOne(specFile string) int {
	b, err := os.ReadFile(specFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	var s sandbox.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 125
	}
	res, err := native.New(native.Options{DataDir: os.Getenv("AGENTKERNEL_DATA_DIR")}).Run(context.Background(), &s, sandbox.Stdio{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentkernel:", err)
		return 125
	}
	return res.ExitCode
}

func bench(n int, ak, img string) error {
	work, err := os.MkdirTemp("", "sandboxbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if img == "" {
		img = filepath.Join(work, "rootfs")
		shift := 0
		if os.Geteuid() == 0 {
			shift = 100000
		}
		if err := buildBusybox(img, shift); err != nil {
			return err
		}
	}
	specFile := filepath.Join(work, "spec.json")
	b, _ := json.Marshal(spec(img))
	if err := os.WriteFile(specFile, b, 0o644); err != nil {
		return err
	}
	self, _ := os.Executable()
	// Like the real CLI, runs get a data directory (the seccomp cache).
	_ = os.Setenv("AGENTKERNEL_DATA_DIR", filepath.Join(work, "data"))

	cases := []harness.Case{{Name: "agentkernel (native)", Argv: []string{self, "run", specFile}}}
	if ak != "" {
		// The whole CLI: config, detection, policy (moderate: copy-on-write
		// workspace, memory/pids/cpu limits, so a cgroup), host image.
		// With --network none, as bwrap --unshare-all and crun have no
		// network either; the one "network full" case shows what a
		// network that the command does not use costs (bench/cmd/netbench
		// measures the network itself).
		akData := filepath.Join(work, "akdata")
		cases = append(cases,
			harness.Case{Name: "agentkernel run --image host (CLI)", Argv: []string{ak, "--data-dir", akData, "run", "--no-daemon", "--network", "none", "--image", "host", "--", "/bin/true"}},
			harness.Case{Name: "agentkernel run --image host --network full (CLI)", Argv: []string{ak, "--data-dir", akData, "run", "--no-daemon", "--network", "full", "--image", "host", "--", "/bin/true"}})
		// The same through a running daemon (warm pool of prepared
		// sandboxes of that spec).
		if out, err := exec.Command(ak, "--data-dir", akData, "daemon", "start").CombinedOutput(); err != nil {
			return fmt.Errorf("daemon start: %v: %s", err, out)
		}
		defer exec.Command(ak, "--data-dir", akData, "daemon", "stop").Run()
		// After each daemon run the daemon refills its pool in the
		// background: let it finish before the next case is timed.
		const refill = 30 * time.Millisecond
		cases = append(cases, harness.Case{Name: "agentkernel run (CLI, daemon)", Argv: []string{ak, "--data-dir", akData, "run", "--network", "none", "--image", "host", "--", "/bin/true"}, Settle: refill})
		// The same busybox root filesystem bwrap gets, as an image of the
		// CLI's store (imported from a tarball, as a user would).
		if ref, err := importBusybox(ak, akData, work); err != nil {
			fmt.Fprintln(os.Stderr, "no busybox image for the CLI:", err)
		} else {
			cases = append(cases,
				harness.Case{Name: "agentkernel run --image busybox (CLI)", Argv: []string{ak, "--data-dir", akData, "run", "--no-daemon", "--network", "none", "--image", ref, "--", "/bin/true"}},
				harness.Case{Name: "agentkernel run --image busybox (daemon)", Argv: []string{ak, "--data-dir", akData, "run", "--network", "none", "--image", ref, "--", "/bin/true"}, Settle: refill})
		}
	}
	if p, err := exec.LookPath("bwrap"); err == nil {
		cases = append(cases, harness.Case{Name: "bwrap --unshare-all", Argv: []string{p, "--unshare-all", "--ro-bind", img, "/", "--proc", "/proc", "--dev", "/dev", "/bin/true"}})
		if ak != "" {
			cases = append(cases, harness.Case{Name: "bwrap --unshare-all (host /)", Argv: []string{p, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "/bin/true"}})
		}
	}
	bundle := filepath.Join(work, "bundle")
	if err := ociBundle(bundle, img); err != nil {
		fmt.Fprintln(os.Stderr, "no OCI bundle:", err)
	} else {
		for _, rt := range []string{"crun", "runc"} {
			p, err := exec.LookPath(rt)
			if err != nil {
				continue
			}
			argv := []string{p, "run", "--bundle", bundle, "bench"}
			if rt == "crun" {
				if out, err := exec.Command(p, "run", "--bundle", bundle, "bench-probe").CombinedOutput(); err != nil && strings.Contains(string(out), "hybrid") {
					// MACHINE-NOTES: crun refuses hybrid cgroups until hugetlb is on v1.
					_ = os.MkdirAll("/sys/fs/cgroup/hugetlb", 0o755)
					_ = exec.Command("mount", "-t", "cgroup", "-o", "hugetlb", "cgroup", "/sys/fs/cgroup/hugetlb").Run()
					fmt.Fprintln(os.Stderr, "applied the hugetlb fix for crun (MACHINE-NOTES)")
				}
			}
			cases = append(cases, harness.Case{Name: rt + " run", Argv: argv})
		}
	}
	fmt.Printf("run /bin/true, %d runs per case, interleaved (%s)\n\n", n, time.Now().Format("2006-01-02 15:04"))
	stats := harness.Run(context.Background(), cases, harness.Options{Runs: n, Warmup: 5, Interleave: true})
	harness.Report(os.Stdout, stats)
	for _, s := range stats[1:] {
		if s.Runs > 0 && stats[0].Runs > 0 {
			fmt.Printf("\nagentkernel / %s = %.2f", s.Name, float64(stats[0].Median)/float64(s.Median))
		}
	}
	fmt.Println()
	targets(stats)
	if _, err := os.Stat(filepath.Join(work, "busybox.tar")); err == nil {
		slowRuntimes(cases, work, max(20, n/5))
	}

	// Throughput and peak RSS are the CLI's when it is timed (what users
	// run), else the minimal main's.
	what, argv := "agentkernel native", []string{self, "run", specFile}
	for _, c := range cases {
		if c.Name == "agentkernel run --image busybox (CLI)" {
			what, argv = "agentkernel run --image busybox, no daemon", c.Argv
		}
	}
	fmt.Printf("\nthroughput (%s, /bin/true):\n", what)
	for _, par := range []int{1, 2, 8} {
		total := 200
		start := time.Now()
		var wg sync.WaitGroup
		ch := make(chan struct{}, total)
		for i := 0; i < total; i++ {
			ch <- struct{}{}
		}
		close(ch)
		var failed int
		var mu sync.Mutex
		for w := 0; w < par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range ch {
					if err := exec.Command(argv[0], argv[1:]...).Run(); err != nil {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		fmt.Printf("  %d concurrent: %.0f sandboxes/s (%d runs, %d failed)\n", par, float64(total)/d.Seconds(), total, failed)
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Run(); err != nil {
		return err
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	fmt.Printf("\npeak RSS of a run (%s; the largest of agentkernel and the processes it waited for): %.1f MiB\n", what, float64(ru.Maxrss)/1024)
	return nil
}

// targets prints the CLI's ratios that the targets name: at most 1.3×
// bwrap's median and below crun's.
func targets(stats []harness.Stats) {
	med := map[string]time.Duration{}
	for _, s := range stats {
		if s.Runs > 0 {
			med[s.Name] = s.Median
		}
	}
	cli, ok := med["agentkernel run --image busybox (CLI)"]
	if !ok {
		return
	}
	fmt.Println("\ntargets (agentkernel run --image busybox, no daemon):")
	for _, t := range []struct {
		name, goal string
		max        float64
	}{{"bwrap --unshare-all", "at most 1.3", 1.3}, {"crun run", "below 1", 1}} {
		if m, ok := med[t.name]; ok {
			r := float64(cli) / float64(m)
			fmt.Printf("  × %s = %.2f (%s): %s\n", t.name, r, t.goal, verdict(r <= t.max))
		}
	}
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}

// ociBundle writes a runc/crun bundle whose rootfs is img and process is
// /bin/true, from `runc spec` (or crun's) defaults.
func ociBundle(dir, img string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gen := "runc"
	if _, err := exec.LookPath(gen); err != nil {
		gen = "crun"
	}
	cmd := exec.Command(gen, "spec")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s spec: %v %s", gen, err, out)
	}
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	proc := cfg["process"].(map[string]any)
	proc["args"] = []string{"/bin/true"}
	proc["terminal"] = false
	cfg["root"] = map[string]any{"path": img, "readonly": true}
	b, _ = json.MarshalIndent(cfg, "", "  ")
	return os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}

// buildBusybox makes a minimal busybox image directory (applet links,
// /etc/passwd), owned by shift like the image store's shifted layers.
func buildBusybox(root string, shift int) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not installed (apt-get install -y busybox-static): %w", err)
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "proc", "sys", "dev", "root", "run"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return err
	}
	for _, p := range strings.Fields(string(bytes.TrimSpace(out))) {
		if p != "bin/busybox" {
			_ = os.Symlink("/bin/busybox", filepath.Join(root, p))
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\n"), 0o644); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, shift, shift)
	})
}

// importBusybox builds an unshifted busybox root filesystem, tars it and
// imports it into the CLI's image store; it returns the image's name.
func importBusybox(ak, dataDir, work string) (string, error) {
	dir := filepath.Join(work, "busybox-import")
	if err := buildBusybox(dir, 0); err != nil {
		return "", err
	}
	tarball := filepath.Join(work, "busybox.tar")
	if out, err := exec.Command("tar", "-C", dir, "-cf", tarball, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar: %v: %s", err, out)
	}
	const ref = "sandboxbench-busybox:1"
	if out, err := exec.Command(ak, "--data-dir", dataDir, "images", "import", tarball, ref).CombinedOutput(); err != nil {
		return "", fmt.Errorf("images import: %v: %s", err, out)
	}
	return ref, nil
}

// slowRuntimes times podman and docker (each when installed), which take
// a hundred milliseconds and more per run, in a second interleaved
// measurement with fewer runs, beside the busybox CLI case and bwrap again
// so that their ratios come from the same minutes. Both run the busybox
// root filesystem imported as an image, with no network.
func slowRuntimes(fast []harness.Case, work string, n int) {
	var cases []harness.Case
	for _, c := range fast {
		if c.Name == "agentkernel run --image busybox (CLI)" || c.Name == "bwrap --unshare-all" {
			cases = append(cases, c)
		}
	}
	base := len(cases)
	tarball := filepath.Join(work, "busybox.tar")
	const ref = "sandboxbench-busybox:1"
	// Their cleanup (conmon, the shim) can finish after the client exits.
	const settle = 50 * time.Millisecond
	if p, err := exec.LookPath("podman"); err == nil {
		if out, err := exec.Command(p, "import", tarball, ref).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "podman import: %v: %s\n", err, out)
		} else {
			// MACHINE-NOTES: podman as root needs these ulimits here.
			cases = append(cases, harness.Case{Name: "podman run --rm", Settle: settle, Argv: []string{p, "run", "--rm", "--network=none",
				"--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768", ref, "/bin/true"}})
		}
	}
	if docker, stop, err := harness.StartDocker(work); err != nil {
		fmt.Fprintln(os.Stderr, "no docker:", err)
	} else {
		defer stop()
		if out, err := exec.Command(docker[0], append(docker[1:], "import", tarball, ref)...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "docker import: %v: %s\n", err, out)
		} else {
			cases = append(cases, harness.Case{Name: "docker run --rm", Settle: settle, Argv: append(append([]string{}, docker...), "run", "--rm", "--network=none", ref, "/bin/true")})
		}
	}
	if len(cases) == base || base == 0 {
		return
	}
	fmt.Printf("\npodman and docker, %d runs per case, interleaved (%s)\n\n", n, time.Now().Format("2006-01-02 15:04"))
	stats := harness.Run(context.Background(), cases, harness.Options{Runs: n, Warmup: 3, Interleave: true})
	harness.Report(os.Stdout, stats)
	for _, s := range stats[base:] {
		if s.Runs > 0 && stats[0].Runs > 0 {
			r := float64(s.Median) / float64(stats[0].Median)
			fmt.Printf("\n%s / agentkernel = %.1f", s.Name, r)
			if s.Name == "podman run --rm" {
				fmt.Printf(" (target: at least 20): %s", verdict(r >= 20))
			}
		}
	}
	fmt.Println()
}
