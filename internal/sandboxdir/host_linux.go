package sandboxdir

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// HostSample is how long Host samples the machine's CPU.
const HostSample = 100 * time.Millisecond

// Host reports the machine's totals as 'stats' shows them: CPUs, CPU
// (sampled over HostSample), load, memory, and the disk the data
// directory dataDir takes and what its file system has left. Sandboxes
// and Running are the caller's (sandbox.Manager.Stats fills them).
func Host(ctx context.Context, dataDir string) (sandbox.HostUsage, error) {
	h := sandbox.HostUsage{CPUs: numCPU()}
	busy0, total0 := cpuTicks()
	t := time.NewTimer(HostSample)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return h, ctx.Err()
	}
	busy1, total1 := cpuTicks()
	if total1 > total0 {
		h.CPUPercent = 100 * float64(busy1-busy0) / float64(total1-total0)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			h.Load1, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	mem := meminfo()
	h.MemoryTotalBytes = mem["MemTotal"]
	h.MemoryUsedBytes = mem["MemTotal"] - mem["MemAvailable"]
	h.DataDirBytes = diskUsage(dataDir)
	var sfs unix.Statfs_t
	if unix.Statfs(dataDir, &sfs) == nil {
		h.DiskFreeBytes = int64(sfs.Bavail) * int64(sfs.Bsize)
	}
	return h, nil
}

// WritableBytes is the size of the writable layers of the sandbox whose
// directory is dir, as both binaries' stats report it: the apparent
// sizes of the files under its root's upper directory and under the
// upper directory of each copy-on-write volume (cow<i>/upper); 0 when
// there is none.
func WritableBytes(dir string) int64 {
	n := upperBytes(filepath.Join(dir, "upper"))
	cows, _ := filepath.Glob(filepath.Join(dir, "cow[0-9]*"))
	for _, c := range cows {
		n += upperBytes(filepath.Join(c, "upper"))
	}
	return n
}

// upperBytes is the apparent size of the files under upper.
func upperBytes(upper string) int64 {
	var n int64
	_ = filepath.WalkDir(upper, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func numCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		return set.Count()
	}
	return 1
}

// cpuTicks are the busy and total jiffies of /proc/stat's cpu line.
func cpuTicks() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) == 0 {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}

// meminfo is /proc/meminfo in bytes.
func meminfo() map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fs[0], 10, 64)
		out[k] = n * 1024
	}
	return out
}

// diskUsage is the space the files under dir take (allocated blocks,
// hard links counted once, other file systems skipped).
func diskUsage(dir string) int64 {
	var n int64
	var root unix.Stat_t
	if unix.Lstat(dir, &root) != nil {
		return 0
	}
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != root.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			k := [2]uint64{st.Dev, st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		n += st.Blocks * 512
		return nil
	})
	return n
}
