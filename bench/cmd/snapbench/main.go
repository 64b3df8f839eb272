// Command snapbench times agentkernel's snapshots against docker's
// commit, on the same data: a running sandbox (a running container)
// whose root holds SIZE written as files of 1 MiB is snapshotted
// (`snapshot take` / `docker commit`), and a new sandbox made from the
// snapshot (`snapshot restore`, then `sandbox start` and `exec true` /
// `docker run --rm IMAGE true`). Rounds are interleaved, each of its
// steps after a `sync`, and each round's snapshots, sandboxes and
// images removed before the next; medians are printed per size.
//
// With -gvisor MIBS it also times gVisor's memory snapshots: a
// persistent gvisor sandbox whose detached command holds MIB MiB of
// touched memory is snapshotted with `snapshot take --memory` and
// without, and the first start of a sandbox restored from each (to an
// exec that answers, then to the command holding its memory: back by
// itself from the memory snapshot, run again after the files-only one)
// is timed against a fresh gvisor sandbox's, with the memory image's
// size on disk (gvisor.go). It needs runsc (AGENTKERNEL_RUNSC, or
// scripts/runsc.sh's cache); without one gvisor is left out, or, under
// AGENTKERNEL_TEST_STRICT=1, the run fails.
//
// It needs root, busybox-static, and docker.io for the comparison: a
// dockerd already answering, else one started here with its own data
// root (--bridge=none --iptables=false), stopped at the end. Both get
// the same busybox root file system as an image (`images import`,
// `docker import`).
//
//	go build -o bin/ ./cmd/... && go run ./bench/cmd/snapbench -ak bin/agentkernel -sizes 10,1024 -n 5
//	go run ./bench/cmd/snapbench -ak bin/agentkernel -sizes '' -gvisor 16,64 -n 5
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
)

func main() {
	ak := flag.String("ak", "bin/agentkernel", "the agentkernel binary (agentkernel-full beside it)")
	sizes := flag.String("sizes", "10,1024", "sizes to write, in MiB, comma-separated")
	n := flag.Int("n", 5, "rounds per size")
	work := flag.String("work", "", "working directory (a temporary one when empty; removed at the end)")
	noDocker := flag.Bool("no-docker", false, "time agentkernel only")
	gvisorMiB := flag.String("gvisor", "", "memory snapshots of gvisor sandboxes whose detached command holds this many MiB, comma-separated (none when empty)")
	flag.Parse()
	if os.Geteuid() != 0 {
		fatal("snapbench needs root")
	}
	dir := *work
	if dir == "" {
		d, err := os.MkdirTemp("/var/tmp", "snapbench-")
		if err != nil {
			fatal(err)
		}
		dir = d
		cleanups = append(cleanups, func() { _ = os.RemoveAll(d) })
	}
	defer cleanup()
	akPath, err := filepath.Abs(*ak)
	if err != nil {
		fatal(err)
	}
	b := &bench{ak: []string{akPath, "--data-dir", filepath.Join(dir, "ak")}}
	tarball := filepath.Join(dir, "busybox.tar")
	if err := busyboxTar(tarball); err != nil {
		fatal(err)
	}
	const ref = "snapbench/busybox:1"
	b.must(append(b.ak, "images", "import", tarball, ref)...)
	if !*noDocker && *sizes != "" {
		docker, stop, err := harness.StartDocker(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "no docker, agentkernel only:", err)
		} else {
			cleanups = append(cleanups, stop)
			b.docker = docker
			b.must(append(b.docker, "import", tarball, ref)...)
		}
	}
	for _, mib := range mibList(*sizes) {
		b.size(ref, mib, *n)
	}
	if gv := mibList(*gvisorMiB); len(gv) > 0 && useGVisor() {
		for _, mib := range gv {
			b.gvisorMemory(ref, dir, mib, *n)
		}
	}
}

// mibList parses a comma-separated list of sizes in MiB ("" is none).
func mibList(list string) []int {
	var out []int
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		mib, err := strconv.Atoi(s)
		if err != nil || mib <= 0 {
			fatal("bad size " + s)
		}
		out = append(out, mib)
	}
	return out
}

type bench struct {
	ak, docker []string
	times      map[string][]time.Duration
	order      []string
}

func (b *bench) size(ref string, mib, n int) {
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(b.ak[2]), &fs); err == nil {
		need := int64(mib) << 20 * 5
		if free := int64(fs.Bavail) * int64(fs.Bsize); free < need {
			fmt.Printf("\n%d MiB: skipped, %d MiB free, %d MiB needed\n", mib, free>>20, need>>20)
			return
		}
	}
	b.times, b.order = map[string][]time.Duration{}, nil
	fill := fmt.Sprintf(`mkdir -p /data && i=0 && while [ $i -lt %d ]; do dd if=/dev/zero of=/data/f$i bs=1048576 count=1 2>/dev/null; i=$((i+1)); done`, mib)
	b.must(append(b.ak, "sandbox", "create", "src", "--image", ref, "--network", "none", "--start")...)
	cleanups = append(cleanups, func() { b.run(append(b.ak, "sandbox", "rm", "--force", "src")...) })
	defer func() { b.run(append(b.ak, "sandbox", "rm", "--force", "src")...) }()
	b.must(append(b.ak, "exec", "src", "--", "sh", "-c", fill)...)
	if b.docker != nil {
		b.must(append(b.docker, "run", "-d", "--name", "snapbench-src", "--network=none", ref, "sleep", "1000000")...)
		cleanups = append(cleanups, func() { b.run(append(b.docker, "rm", "-f", "snapbench-src")...) })
		defer func() { b.run(append(b.docker, "rm", "-f", "snapbench-src")...) }()
		b.must(append(b.docker, "exec", "snapbench-src", "sh", "-c", fill)...)
	}
	for i := 0; i < n; i++ {
		snap, as, img := "s"+strconv.Itoa(i), "r"+strconv.Itoa(i), "snapbench/snap:"+strconv.Itoa(i)
		b.timed("agentkernel snapshot take (running)", append(b.ak, "snapshot", "take", "src", "--name", snap)...)
		if b.docker != nil {
			b.timed("docker commit (running)", append(b.docker, "commit", "snapbench-src", img)...)
		}
		b.timed("agentkernel snapshot restore", append(b.ak, "snapshot", "restore", snap, "--as", as)...)
		b.timed("agentkernel sandbox start + exec true", "sh", "-c", shJoin(append(b.ak, "sandbox", "start", as))+" && "+shJoin(append(b.ak, "exec", as, "--", "true")))
		if b.docker != nil {
			b.timed("docker run --rm IMAGE true", append(b.docker, "run", "--rm", "--network=none", img, "true")...)
			b.run(append(b.docker, "rmi", img)...)
		}
		b.run(append(b.ak, "sandbox", "rm", "--force", as)...)
		b.run(append(b.ak, "snapshot", "delete", snap)...)
	}
	fmt.Printf("\n%d MiB written (files of 1 MiB), %d rounds, interleaved (%s)\n\n", mib, n, time.Now().Format("2006-01-02 15:04"))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tmedian\tmin\tmax")
	for _, k := range b.order {
		d := append([]time.Duration{}, b.times[k]...)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k, ms(d[len(d)/2]), ms(d[0]), ms(d[len(d)-1]))
	}
	_ = tw.Flush()
}

// timed runs argv after a sync and records its wall time under name.
func (b *bench) timed(name string, argv ...string) {
	syscall.Sync()
	start := time.Now()
	b.must(argv...)
	if _, ok := b.times[name]; !ok {
		b.order = append(b.order, name)
	}
	b.times[name] = append(b.times[name], time.Since(start))
}

func (b *bench) must(argv ...string) {
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		fatal(fmt.Sprintf("%s: %v: %s", strings.Join(argv, " "), err, out))
	}
}

func (b *bench) run(argv ...string) { _ = exec.Command(argv[0], argv[1:]...).Run() }

func shJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// cleanups undo what was started, last first, also when fatal ends the
// run.
var cleanups []func()

func cleanup() {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

func fatal(v any) {
	fmt.Fprintln(os.Stderr, "snapbench:", v)
	cleanup()
	os.Exit(1)
}

// busyboxTar writes a root file system tarball: the static busybox and
// its applets' links, and the directories a container runtime mounts
// over.
func busyboxTar(p string) error {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return fmt.Errorf("busybox not installed (apt-get install -y busybox-static): %w", err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin", "dev", "etc", "proc", "sys", "tmp", "root", "data"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	for _, a := range strings.Fields(string(out)) {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(p, buf.Bytes(), 0o644)
}
