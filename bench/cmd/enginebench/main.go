// Command enginebench times `agentkernel run -B docker` and `-B podman`
// against the engines' own command lines, `docker run --rm --network
// none` and `podman run --rm --network none`, on the same busybox
// image, interleaved run by run, and prints a Markdown table of medians.
//
// It starts a private dockerd and podman service (their own data and
// sockets, under a temporary directory it removes), imports a busybox
// root (busybox-static) into docker, and hands the same image to
// agentkernel's store with `images load`. Run as root, after building
// the binaries:
//
//	CGO_ENABLED=0 go build -o /tmp/ak/ ./cmd/agentkernel ./cmd/agentkernel-full
//	go run ./bench/cmd/enginebench -agentkernel /tmp/ak/agentkernel -n 30
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/bench/harness"
)

const image = "enginebench/busybox:1"

func main() {
	ak := flag.String("agentkernel", "agentkernel", "the agentkernel binary (agentkernel-full beside it)")
	n := flag.Int("n", 30, "timed runs per command")
	warm := flag.Int("warmup", 3, "untimed runs per command first")
	engines := flag.String("engines", "docker,podman", "the engines to compare, comma-separated")
	flag.Parse()
	if err := run(*ak, *n, *warm, strings.Split(*engines, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "enginebench:", err)
		os.Exit(1)
	}
}

func run(ak string, n, warm int, engines []string) error {
	work, err := os.MkdirTemp("", "enginebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	archive := filepath.Join(work, "busybox.tar")
	dataDir := filepath.Join(work, "data")
	var cases []harness.Case
	loaded := false
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
		default:
			return fmt.Errorf("unknown engine %q", e)
		}
		defer stop()
		if err := importBusybox(cli, archive, !loaded); err != nil {
			return fmt.Errorf("%s: %w", e, err)
		}
		if !loaded {
			if out, err := exec.Command(ak, "--data-dir", dataDir, "images", "load", "-i", archive).CombinedOutput(); err != nil {
				return fmt.Errorf("images load: %v: %s", err, out)
			}
			loaded = true
		}
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
	stats := harness.Run(context.Background(), cases, harness.Options{Runs: n, Warmup: warm, Interleave: true})
	harness.Report(os.Stdout, stats)
	return nil
}

// importBusybox imports a root of busybox-static into the engine as
// image and, when save is set, saves it as a `docker save` archive.
func importBusybox(cli []string, archive string, save bool) error {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("busybox-static: %w", err)
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
		return err
	}
	imp := exec.Command(cli[0], append(cli[1:], "import", "-", image)...)
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Errorf("import: %v: %s", err, out)
	}
	if !save {
		return nil
	}
	if out, err := exec.Command(cli[0], append(cli[1:], "save", "-o", archive, image)...).CombinedOutput(); err != nil {
		return fmt.Errorf("save: %v: %s", err, out)
	}
	return nil
}
