//go:build linux

package nomadlab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// RemoveNodeData removes dir, a node's agentkernel data directory of a
// test, once that agentkernel (the binary ak) lists no sandbox there and
// no process names dir on its command line (up to 15 s each): a task's
// sandbox ends after its job, and the task's last agentkernel commands
// (a removal, a status check) may still write there.
func RemoveNodeData(ak, dir string) error {
	for i := 0; i < 150; i++ {
		out, err := exec.Command(ak, "--data-dir", dir, "-q", "sandbox", "list", "--all").Output()
		if err == nil && len(strings.Split(strings.TrimSpace(string(out)), "\n")) <= 1 { // the header only
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; i < 150 && processesNaming(dir) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	return os.RemoveAll(dir)
}

// processesNaming counts the processes whose command line names dir.
func processesNaming(dir string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	n := 0
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), dir) {
			n++
		}
	}
	return n
}
