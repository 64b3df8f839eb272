// Command enginebench times `agentkernel run -B docker`, `-B podman` and
// `-B gvisor` against the tools underneath, `docker run --rm --network
// none`, `podman run --rm --network none` and `runsc run` of a bundle
// (bare, and with the cgroup limits of the profile the runs use), on the
// same busybox image, interleaved run by run, and prints a
// Markdown table of medians. With -pooled (the default) it also times
// the same run through the API server (`agentkernel-full serve` on a
// unix socket, one curl request each): cold ("fast": false) and from the
// backend's warm pool ("fast": true), each pooled run followed by a
// pause (-settle) in which the pool refills, so that the refill does not
// land in the next case's time.
//
// It starts a private dockerd and podman service (their own data and
// sockets, under a temporary directory it removes) for the engines it
// is given, and imports one busybox root (busybox-static) into each of
// them and into agentkernel's store (`images import`) under the same
// name. gvisor needs runsc (AGENTKERNEL_RUNSC, or scripts/runsc.sh's
// cache), and no engine: `-engines gvisor` times it alone. Run as root,
// after building the binaries:
//
//	CGO_ENABLED=0 go build -o /tmp/ak/ ./cmd/agentkernel ./cmd/agentkernel-full
//	go run ./bench/cmd/enginebench -agentkernel /tmp/ak/agentkernel -n 15
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
)

const image = "enginebench/busybox:1"

func main() {
	ak := flag.String("agentkernel", "agentkernel", "the agentkernel binary (agentkernel-full beside it)")
	n := flag.Int("n", 30, "timed runs per command")
	warm := flag.Int("warmup", 3, "untimed runs per command first")
	engines := flag.String("engines", "docker,podman", "the backends to compare, comma-separated: docker, podman, gvisor")
	pooled := flag.Bool("pooled", true, "also time the run through the API server, cold and from its warm pool")
	settle := flag.Duration("settle", time.Second, "the pause after each pooled run, in which its pool refills")
	flag.Parse()
	if err := run(*ak, *n, *warm, strings.Split(*engines, ","), *pooled, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "enginebench:", err)
		os.Exit(1)
	}
}

func run(ak string, n, warm int, engines []string, pooled bool, settle time.Duration) error {
	work, err := os.MkdirTemp("", "enginebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	dataDir := filepath.Join(work, "data")
	// One root of busybox-static: imported into agentkernel's store
	// here and into each engine below, under the same name.
	rootfs, err := busyboxRootfs()
	if err != nil {
		return err
	}
	rootfsTar := filepath.Join(work, "busybox-rootfs.tar")
	if err := os.WriteFile(rootfsTar, rootfs, 0o600); err != nil {
		return err
	}
	if out, err := exec.Command(ak, "--data-dir", dataDir, "images", "import", rootfsTar, image).CombinedOutput(); err != nil {
		return fmt.Errorf("images import: %v: %s", err, out)
	}
	var cases []harness.Case
	gvisorCase := false
	hosts := map[string]string{}
	for _, e := range engines {
		var host string
		var stop func()
		var cli []string
		switch e {
		case "docker":
			if host, stop, err = harness.StartPrivateDocker(filepath.Join(work, e)); err != nil {
				return err
			}
			cli = []string{"/usr/bin/docker", "-H", host}
			if _, err := os.Stat(cli[0]); err != nil {
				cli[0] = "docker"
			}
		case "podman":
			if host, stop, err = harness.StartPodmanService(filepath.Join(work, e)); err != nil {
				return err
			}
			cli = []string{"podman", "--remote", "--url", host}
		case "gvisor":
			runsc, err := findRunsc()
			if err != nil {
				return err
			}
			bundle, err := runscBundle(filepath.Join(work, "gvisor"))
			if err != nil {
				return err
			}
			limited, err := limitedBundle(bundle, filepath.Join(work, "gvisor", "limited"))
			if err != nil {
				return err
			}
			// One container id per run ($$ is the shell's pid): runsc
			// run creates, starts, waits for and deletes it. The first
			// bundle is runsc spec's alone; the second adds the cgroup
			// limits of agentkernel's restrictive profile, which the
			// agentkernel case runs under.
			state := filepath.Join(work, "gvisor", "state")
			cases = append(cases,
				harness.Case{Name: "runsc run", Argv: []string{"sh", "-c",
					"exec " + runsc + " --root " + state + " --network=none run --bundle " + bundle + " enginebench-$$"}},
				harness.Case{Name: "runsc run, limits", Argv: []string{"sh", "-c",
					"exec " + runsc + " --root " + state + " --network=none run --bundle " + limited + " enginebench-$$"}})
			gvisorCase = true
			continue
		default:
			return fmt.Errorf("unknown engine %q", e)
		}
		defer stop()
		imp := exec.Command(cli[0], append(cli[1:], "import", "-", image)...)
		imp.Stdin = bytes.NewReader(rootfs)
		if out, err := imp.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: import: %v: %s", e, err, out)
		}
		hosts[e] = host
		env := "DOCKER_HOST="
		if e == "podman" {
			env = "CONTAINER_HOST="
		}
		// The engine's own run of the image, and agentkernel's of the
		// same image from its store (loaded into the engine by the
		// warm-up runs).
		cases = append(cases,
			harness.Case{Name: e + " run", Argv: append(append([]string{}, cli...), "run", "--rm", "--network", "none", image, "/bin/true")},
			harness.Case{Name: "agentkernel -B " + e, Argv: []string{"env", env + host, "XDG_CONFIG_HOME=" + filepath.Join(work, "config"),
				ak, "-q", "--data-dir", dataDir, "run", "-B", e, "-p", "restrictive", "--image", image, "--", "/bin/true"}})
	}
	cfg := filepath.Join(work, "config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg, []byte("[security]\nallow_degraded = [\"landlock\"]\n"), 0o644); err != nil {
		return err
	}
	if gvisorCase {
		cases = append(cases, harness.Case{Name: "agentkernel -B gvisor", Argv: []string{"env", "XDG_CONFIG_HOME=" + filepath.Join(work, "config"),
			ak, "-q", "--data-dir", dataDir, "run", "-B", "gvisor", "-p", "restrictive", "--image", image, "--", "/bin/true"}})
	}
	if pooled {
		sock := filepath.Join(work, "api.sock")
		env := []string{"XDG_CONFIG_HOME=" + filepath.Join(work, "config"), "DOCKER_HOST=" + hosts["docker"], "CONTAINER_HOST=" + hosts["podman"]}
		stop, err := startServe(filepath.Join(filepath.Dir(ak), "agentkernel-full"), dataDir, sock, env)
		if err != nil {
			return err
		}
		defer stop()
		for _, e := range engines {
			for _, fast := range []bool{false, true} {
				body := fmt.Sprintf(`{"command":["/bin/true"],"image":%q,"profile":"restrictive","backend":%q,"fast":%t}`, image, e, fast)
				c := harness.Case{Name: "API -B " + e + " cold", Argv: []string{"curl", "-sf", "-o", "/dev/null", "--unix-socket", sock,
					"-H", "Content-Type: application/json", "-d", body, "http://localhost/run"}}
				if fast {
					c.Name, c.Settle = "API -B "+e+" pooled", settle
				}
				cases = append(cases, c)
			}
		}
	}
	stats := harness.Run(context.Background(), cases, harness.Options{Runs: n, Warmup: warm, Interleave: true})
	harness.Report(os.Stdout, stats)
	if pooled {
		// How the server served its fast runs: a pooled case's runs
		// are hits unless the pool was empty (a miss runs cold).
		out, err := exec.Command("curl", "-sf", "--unix-socket", filepath.Join(work, "api.sock"), "http://localhost/status").Output()
		if err != nil {
			return fmt.Errorf("/status: %w", err)
		}
		var st struct {
			Data struct {
				PoolRuns map[string]int `json:"pool_runs"`
			} `json:"data"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return fmt.Errorf("/status: %w", err)
		}
		fmt.Printf("\nthe server's fast runs, warm-up included: %d from a warm sandbox, %d cold (pool empty)\n", st.Data.PoolRuns["hit"], st.Data.PoolRuns["miss"])
	}
	return nil
}

// busyboxRootfs is a root file system tarball of busybox-static with
// sh and true.
func busyboxRootfs() ([]byte, error) {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox-static: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin", "tmp", "proc", "sys", "dev", "etc"} {
		_ = tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	}
	_ = tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bin))})
	_, _ = tw.Write(bin)
	for _, a := range []string{"sh", "true"} {
		_ = tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// findRunsc is the runsc the gvisor backend would run.
func findRunsc() (string, error) {
	if p := os.Getenv(gvisor.RunscEnv); p != "" {
		return p, nil
	}
	if p := gvisor.RunscCachePath(); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("runsc")
}

// runscBundle makes an OCI bundle in dir whose root is busybox-static
// and whose process is /bin/true (runsc spec's defaults otherwise: no
// terminal, root, a read-only root).
func runscBundle(dir string) (string, error) {
	bundle := filepath.Join(dir, "bundle")
	for _, d := range []string{"rootfs/bin", "rootfs/tmp", "rootfs/proc", "rootfs/dev", "rootfs/sys", "state"} {
		if err := os.MkdirAll(filepath.Join(bundle, d), 0o755); err != nil {
			return "", err
		}
	}
	_ = os.Rename(filepath.Join(bundle, "state"), filepath.Join(dir, "state"))
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return "", fmt.Errorf("busybox-static: %w", err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "rootfs/bin/busybox"), bin, 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink("busybox", filepath.Join(bundle, "rootfs/bin/true")); err != nil {
		return "", err
	}
	runsc, err := findRunsc()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(runsc, "spec", "--", "/bin/true")
	cmd.Dir = bundle
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("runsc spec: %v: %s", err, out)
	}
	return bundle, nil
}

// limitedBundle makes a bundle in dir that is bundle (its root named by
// absolute path) with the restrictive profile's cgroup limits: 512 MiB
// of memory, half a CPU, 256 processes, in a cgroup runsc makes beside
// its own and removes after each run.
func limitedBundle(bundle, dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return "", err
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", err
	}
	root, _ := cfg["root"].(map[string]any)
	linux, _ := cfg["linux"].(map[string]any)
	if root == nil || linux == nil {
		return "", errors.New("runsc spec: no root or linux section")
	}
	root["path"] = filepath.Join(bundle, "rootfs")
	linux["cgroupsPath"] = "enginebench-limits"
	linux["resources"] = map[string]any{
		"memory": map[string]any{"limit": 512 << 20},
		"cpu":    map[string]any{"quota": 50000, "period": 100000},
		"pids":   map[string]any{"limit": 256},
	}
	if b, err = json.Marshal(cfg); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
}

// startServe starts `agentkernel-full serve` on a unix socket and waits
// until it answers /health.
func startServe(full, dataDir, sock string, env []string) (stop func(), err error) {
	cmd := exec.Command(full, "-q", "--data-dir", dataDir, "serve", "--unix", sock)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	for i := 0; i < 300; i++ {
		if exec.Command("curl", "-sf", "-o", "/dev/null", "--unix-socket", sock, "http://localhost/health").Run() == nil {
			return stop, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return nil, errors.New("agentkernel serve did not answer /health within 30 s")
}
