package idletrim

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

func rssKB(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		testenv.Missing(t, "no /proc/self/smaps_rollup (Linux 4.14 or later): %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "Rss:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	t.Fatal("no Rss in smaps_rollup")
	return 0
}

// TestTrimDropsExecutablePages trims this test binary for real: its
// resident set must shrink by at least most of the dropped text, and the
// process must go on working (goroutines, GC, maps, formatting).
func TestTrimDropsExecutablePages(t *testing.T) {
	before := rssKB(t)
	st, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	after := rssKB(t)
	if st.Mappings == 0 || st.Bytes == 0 {
		t.Fatalf("nothing dropped: %+v", st)
	}
	if after >= before {
		t.Fatalf("RSS %d kB before, %d kB after trimming %d mappings (%d bytes)", before, after, st.Mappings, st.Bytes)
	}
	t.Logf("RSS %d kB -> %d kB (%d mappings, %d MiB of address space)", before, after, st.Mappings, st.Bytes>>20)
	// Everything still runs, from pages mapped again on demand.
	done := make(chan int)
	go func() {
		m := map[string]int{}
		for i := range 10000 {
			m[strconv.Itoa(i)] = i
		}
		runtime.GC()
		done <- len(m)
	}()
	if n := <-done; n != 10000 {
		t.Fatalf("map has %d entries", n)
	}
}

func TestDroppable(t *testing.T) {
	smaps := `00400000-00800000 r-xp 00000000 fd:01 42                                 /usr/bin/agentkernel
Size:               4096 kB
Rss:                2048 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
00800000-00a00000 r--p 00400000 fd:01 42                                 /usr/bin/agentkernel
Size:               2048 kB
Anonymous:             0 kB
00a00000-00a10000 r--p 00600000 fd:01 42                                 /usr/bin/agentkernel
Size:                 64 kB
Anonymous:             8 kB
00a10000-00a20000 rw-p 00610000 fd:01 42                                 /usr/bin/agentkernel
Anonymous:             0 kB
00b00000-00b10000 r--p 00000000 fd:01 43                                 /usr/lib/other.so
Anonymous:             0 kB
00c00000-00c10000 r--p 00000000 fd:02 42                                 /mnt/x
Anonymous:             0 kB
00d00000-00d10000 r--s 00000000 fd:01 42                                 /usr/bin/agentkernel
Anonymous:             0 kB
00e00000-00e10000 r--p 00620000 fd:01 42                                 /usr/bin/agentkernel
7ffd0000-7ffe0000 rw-p 00000000 00:00 0                                  [stack]
Anonymous:            64 kB
`
	maps, err := parseSmaps(strings.NewReader(smaps), make([]byte, 64), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := droppable(maps, 0x00400100)
	var starts []uint64
	for _, m := range got {
		starts = append(starts, m.start)
	}
	// Text and clean rodata only: not the relocated (anonymous) page,
	// the writable data, another file, another device, a shared
	// mapping, or a mapping whose Anonymous line is missing.
	if len(starts) != 2 || starts[0] != 0x00400000 || starts[1] != 0x00800000 {
		t.Fatalf("droppable = %#x", starts)
	}
	if got := droppable(maps, 0x7ffd0100); got != nil {
		t.Fatalf("anonymous pc: %v", got)
	}
	if _, err := parseSmaps(strings.NewReader("zzz r-xp 0 fd:01 42 /x\n"), make([]byte, 64), nil); err == nil {
		t.Fatal("bad header accepted")
	}
}

func TestTrimmerWaitsForQuiet(t *testing.T) {
	var n atomic.Int32
	tr := &Trimmer{quiet: 30 * time.Millisecond, trim: func() { n.Add(1) }}
	tr.timer = time.AfterFunc(time.Hour, tr.fire)
	done := tr.Busy()
	tr.fire() // a timer that fired while busy does nothing
	if n.Load() != 0 {
		t.Fatal("trimmed while busy")
	}
	done()
	done() // a second call is harmless
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n.Load() != 1 {
		t.Fatalf("trims after the quiet period: %d", n.Load())
	}
	tr.Stop()
	tr.fire()
	if n.Load() != 1 {
		t.Fatal("trimmed after Stop")
	}
}
