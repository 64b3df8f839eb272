package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// holdMark is the sleep that the holder becomes once its memory is
// touched: seen in the sandbox's ps, the memory is held.
const holdMark = "sleep 987654"

// holder is the detached command of the gvisor comparison: dd reads MiB
// of /dev/urandom into one buffer (random, so that no compression or
// zero-page skipping shrinks the checkpoint) and blocks writing it into
// a pipe nobody drains; the reader takes the first byte, which dd writes
// only once its whole buffer is read, says "ready" and becomes
// holdMark. dd keeps the buffer for as long as the command runs.
func holder(mib int) []string {
	return []string{"sh", "-c", fmt.Sprintf("dd if=/dev/urandom bs=%dM count=1 iflag=fullblock 2>/dev/null | { head -c 1 >/dev/null; echo ready; exec %s; }", mib, holdMark)}
}

// findRunsc is the runsc the gvisor backend would run, or "" with why
// not.
func findRunsc() (string, error) {
	if p := os.Getenv(gvisor.RunscEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", gvisor.RunscEnv, p, err)
		}
		return p, nil
	}
	if p := gvisor.RunscCachePath(); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		return "", fmt.Errorf("runsc (gVisor) not found: not in %s nor PATH, and %s is not set (scripts/runsc.sh builds it)", filepath.Dir(gvisor.RunscCachePath()), gvisor.RunscEnv)
	}
	return p, nil
}

// useGVisor points the agentkernel commands at runsc. A missing runsc
// leaves gvisor out of the run, as a missing docker leaves docker out,
// unless AGENTKERNEL_TEST_STRICT=1, where it is a failure.
func useGVisor() bool {
	runsc, err := findRunsc()
	if err != nil {
		if testenv.Strict() {
			fatal(fmt.Sprintf("%v (%s=1: a missing prerequisite is a failure)", err, testenv.StrictEnv))
		}
		fmt.Fprintln(os.Stderr, "no gvisor memory snapshots, left out:", err)
		return false
	}
	if err := os.Setenv(gvisor.RunscEnv, runsc); err != nil {
		fatal(err)
	}
	return true
}

// gvisorMemory times a memory snapshot (`snapshot take --memory`) of a
// persistent gvisor sandbox whose detached command holds mib MiB, and
// the first start of a sandbox restored from it, against a files-only
// snapshot of the same sandbox and a fresh sandbox: each to the sandbox
// answering an exec, then to the command holding its memory again (the
// memory snapshot brings it back running; the others run it anew).
func (b *bench) gvisorMemory(ref, work string, mib, n int) {
	b.times, b.order = map[string][]time.Duration{}, nil
	load := loadavg()
	// The project directory the sandboxes see at /workspace (moderate:
	// copy-on-write): an empty one, beside the data directory.
	proj := filepath.Join(work, "project")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		fatal(err)
	}
	data := b.ak[2]
	create := func(name string) []string {
		return append(b.ak, "sandbox", "create", name, "-B", "gvisor", "--image", ref, "--network", "none", "--dir", proj)
	}
	rm := func(names ...string) {
		for _, s := range names {
			b.run(append(b.ak, "sandbox", "rm", "--force", s)...)
		}
	}
	b.must(append(create("gsrc"), "--start")...)
	cleanups = append(cleanups, func() { rm("gsrc") })
	defer rm("gsrc")
	id := strings.TrimSpace(b.out(append(append(b.ak, "exec", "-d", "gsrc", "--"), holder(mib)...)...))
	b.waitHeld("gsrc", 60*time.Second)
	fmt.Printf("\n%d MiB held: the holder's dd has %s resident in the source sandbox\n", mib, b.holderRSS("gsrc"))

	var memSize, memAlloc, memLayers, fsLayers []int64
	for i := 0; i < n; i++ {
		is := strconv.Itoa(i)
		mem, files := "gm"+is, "gf"+is
		rmem, rfiles, cold := "grm"+is, "grf"+is, "gc"+is
		cleanups = append(cleanups, func() {
			rm(rmem, rfiles, cold)
			b.run(append(b.ak, "snapshot", "delete", mem)...)
			b.run(append(b.ak, "snapshot", "delete", files)...)
		})

		b.timed("snapshot take --memory", append(b.ak, "snapshot", "take", "gsrc", "--name", mem, "--memory")...)
		b.timed("snapshot take (files only)", append(b.ak, "snapshot", "take", "gsrc", "--name", files)...)
		size, alloc := treeSize(filepath.Join(data, "snapshots", "memory", mem))
		memSize, memAlloc = append(memSize, size), append(memAlloc, alloc)
		memLayers = append(memLayers, snapshotLayers(data, mem))
		fsLayers = append(fsLayers, snapshotLayers(data, files))

		// The memory snapshot: its first start restores the sandbox,
		// the detached command with it.
		r := b.start("memory", append(b.ak, "snapshot", "restore", mem, "--as", rmem), rmem)
		b.waitHeld(rmem, 60*time.Second)
		b.add("memory: + the command seen holding its memory", time.Since(r))
		if st := strings.TrimSpace(b.out(append(b.ak, "exec", "--status", id, rmem)...)); st != "running" {
			fatal(fmt.Sprintf("the restored sandbox's detached command %s: %q, not running", id, st))
		}
		if i == 0 {
			fmt.Printf("%d MiB held: the holder's dd has %s resident in the sandbox restored from the memory snapshot\n", mib, b.holderRSS(rmem))
		}

		// The files-only snapshot: a cold boot over the same files; the
		// command is run anew.
		r = b.start("files", append(b.ak, "snapshot", "restore", files, "--as", rfiles), rfiles)
		b.must(append(append(b.ak, "exec", "-d", rfiles, "--"), holder(mib)...)...)
		b.waitHeld(rfiles, 60*time.Second)
		b.add("files: + the command run again, holding its memory", time.Since(r))

		// A fresh sandbox of the same image and flags.
		r = b.start("cold", create(cold), cold)
		b.must(append(append(b.ak, "exec", "-d", cold, "--"), holder(mib)...)...)
		b.waitHeld(cold, 60*time.Second)
		b.add("cold: + the command run, holding its memory", time.Since(r))

		rm(rmem, rfiles, cold)
		b.run(append(b.ak, "snapshot", "delete", mem)...)
		b.run(append(b.ak, "snapshot", "delete", files)...)
	}

	fmt.Printf("\ngvisor, a detached command holding %d MiB, %d rounds, interleaved (%s, load average %s at the start, %s at the end)\n\n", mib, n, time.Now().Format("2006-01-02 15:04"), load, loadavg())
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tmedian\tmin\tmax")
	for _, k := range b.order {
		d := append([]time.Duration{}, b.times[k]...)
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k, ms(d[len(d)/2]), ms(d[0]), ms(d[len(d)-1]))
	}
	_ = tw.Flush()
	fmt.Printf("\non disk (medians): the memory image %s (%s allocated), the memory snapshot's copied layers %s, the files-only snapshot's copied layers %s\n",
		mibs(median64(memSize)), mibs(median64(memAlloc)), mibs(median64(memLayers)), mibs(median64(fsLayers)))
}

// start times a sandbox's making (a restore, or a create), its first
// start, and an exec that answers, each as its own step and the three
// together, under the case's name, and returns when it began.
func (b *bench) start(kase string, mk []string, name string) time.Time {
	syscall.Sync()
	begin := time.Now()
	b.step(kase+": "+mk[len(b.ak)]+" "+mk[len(b.ak)+1], mk...)
	b.step(kase+": sandbox start", append(b.ak, "sandbox", "start", name)...)
	b.step(kase+": exec true", append(b.ak, "exec", name, "--", "true")...)
	b.add(kase+": until an exec answers", time.Since(begin))
	return begin
}

// step runs argv and records its wall time under name (no sync: a step
// of a sequence timed as a whole).
func (b *bench) step(name string, argv ...string) {
	start := time.Now()
	b.must(argv...)
	b.add(name, time.Since(start))
}

func (b *bench) add(name string, d time.Duration) {
	if _, ok := b.times[name]; !ok {
		b.order = append(b.order, name)
	}
	b.times[name] = append(b.times[name], d)
}

// waitHeld polls the sandbox's processes (one exec of ps at a time)
// until the holder has touched its memory and become holdMark.
func (b *bench) waitHeld(name string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		out, err := exec.Command(b.ak[0], append(b.ak[1:], "exec", name, "--", "ps", "-o", "args")...).CombinedOutput()
		if err == nil && strings.Contains(string(out), holdMark) {
			return
		}
		if time.Now().After(deadline) {
			fatal(fmt.Sprintf("%s: the detached command does not hold its memory after %v: %v: %s", name, limit, err, out))
		}
	}
}

// holderRSS is the resident size of the holder's dd, as ps in the
// sandbox says it ("?" where it does not).
func (b *bench) holderRSS(name string) string {
	out, err := exec.Command(b.ak[0], append(b.ak[1:], "exec", name, "--", "ps", "-o", "rss,args")...).Output()
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.Contains(l, "dd if=/dev/urandom") && strings.HasPrefix(f[1], "{dd}") {
			return f[0]
		}
	}
	return "?"
}

func (b *bench) out(argv ...string) string {
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		fatal(fmt.Sprintf("%s: %v", strings.Join(argv, " "), err))
	}
	return string(out)
}

// treeSize is the apparent size of the regular files under dir, and the
// blocks they take.
func treeSize(dir string) (size, alloc int64) {
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		size += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			alloc += int64(st.Blocks) * 512
		}
		return nil
	})
	return size, alloc
}

// snapshotLayers is the apparent size of the layers a snapshot copied
// (the paths of its record under the data directory's snapshots/layers).
func snapshotLayers(data, snap string) int64 {
	raw, err := os.ReadFile(filepath.Join(data, "snapshots", snap+".json"))
	if err != nil {
		fatal(err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		fatal(fmt.Errorf("snapshot %s: %w", snap, err))
	}
	prefix := filepath.Join(data, "snapshots", "layers") + string(filepath.Separator)
	seen := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if strings.HasPrefix(v, prefix) {
				seen[v] = true
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	var total int64
	for p := range seen {
		s, _ := treeSize(p)
		total += s
	}
	return total
}

func median64(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]int64{}, v...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func mibs(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// loadavg is the one-minute load average, "?" where unknown.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
