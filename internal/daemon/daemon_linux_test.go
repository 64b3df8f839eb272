package daemon

import (
	"os"
	"strconv"
	"testing"
)

// TestStalePIDFile: a pid file naming a live process that is not this
// data directory's daemon (a reused pid) does not count, so 'daemon
// stop' never signals an unrelated process.
func TestStalePIDFile(t *testing.T) {
	p := PathsFor(t.TempDir())
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{strconv.Itoa(os.Getpid()), "1", "garbage", "-5", "999999999"} {
		if err := os.WriteFile(p.PIDFile, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if pid := p.PID(); pid != 0 {
			t.Errorf("pid file %q: PID() = %d, want 0", content, pid)
		}
	}
	if err := os.Remove(p.PIDFile); err != nil {
		t.Fatal(err)
	}
	if pid := p.PID(); pid != 0 {
		t.Errorf("no pid file: PID() = %d", pid)
	}
}
