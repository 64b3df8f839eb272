//go:build linux

// Package crash checks that agentkernel leaves nothing behind when it dies
// at the worst moment, and that a full disk never corrupts the image
// cache: it drives the built binary with a private --data-dir, kills it
// (or its sandbox init) with SIGKILL at random points of a run, runs
// `agentkernel gc`, and then looks for mounts, cgroups, processes and
// files that should not be there. It needs root (namespaces, mounts,
// cgroups) and skips otherwise.
package crash

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/test/testbin"
)

// binary is the agentkernel binary built once for the whole package, in a
// directory of its own so that its path identifies our processes.
var binary string

func TestMain(m *testing.M) {
	testbin.Main(m.Run, &binary, "crash", "needs root for namespaces, mounts and cgroups")
}

// result is one finished agentkernel invocation.
type result struct {
	args           []string
	stdout, stderr string
	code           int
	signal         syscall.Signal // non-zero when it died of a signal
	took           time.Duration
}

func (r result) String() string {
	return fmt.Sprintf("agentkernel %s: exit %d (signal %d) after %v\nstdout: %q\nstderr: %q",
		strings.Join(r.args, " "), r.code, int(r.signal), r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// ak runs agentkernel with a private data dir and HOME.
type ak struct {
	dataDir, home, dir string
	env                []string
}

func newAK(t *testing.T) *ak {
	t.Helper()
	return &ak{dataDir: t.TempDir(), home: t.TempDir(), dir: t.TempDir()}
}

func (a *ak) cmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--data-dir", a.dataDir}, args...)
	c := exec.CommandContext(ctx, binary, full...)
	c.Dir = a.dir
	c.Env = append([]string{"HOME=" + a.home, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"XDG_CONFIG_HOME=" + filepath.Join(a.home, ".config")}, a.env...)
	return c
}

// run runs agentkernel to completion (at most a minute). It never fails
// the test itself except when the binary cannot be started.
func (a *ak) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := a.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("agentkernel %v: %v", args, err)
		}
	}
	return finishQuiet(args, err, out.String(), errb.String(), time.Since(start))
}

// hasStackTrace reports whether s looks like a Go panic or stack dump.
func hasStackTrace(s string) bool {
	return strings.Contains(s, "goroutine ") || strings.Contains(s, "panic:")
}
