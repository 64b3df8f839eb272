//go:build linux

// Package e2e drives the built agentkernel binary the way users do: real
// namespaces and mounts, a real OCI registry served in-process with images
// the tests build, real exit codes and signals.
package e2e

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

// binary is the agentkernel binary built once for the whole package.
var binary string

func TestMain(m *testing.M) {
	testbin.Main(m.Run, &binary, "e2e", "needs root for namespaces and mounts")
}

// result is one finished agentkernel invocation.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// ak runs agentkernel with a private data dir and HOME, in dir.
type ak struct {
	t       *testing.T
	dataDir string
	home    string
	dir     string
	stdin   string
	env     []string
	// bin replaces the built binary and wrap is put before it (setpriv
	// for another user), when set.
	bin  string
	wrap []string
}

func newAK(t *testing.T) *ak {
	t.Helper()
	return &ak{t: t, dataDir: t.TempDir(), home: t.TempDir(), dir: t.TempDir()}
}

func (a *ak) cmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--data-dir", a.dataDir}, args...)
	bin := binary
	if a.bin != "" {
		bin = a.bin
	}
	if len(a.wrap) > 0 {
		full = append(append(append([]string{}, a.wrap[1:]...), bin), full...)
		bin = a.wrap[0]
	}
	c := exec.CommandContext(ctx, bin, full...)
	c.Dir = a.dir
	c.Env = append([]string{"HOME=" + a.home, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + filepath.Join(a.home, ".config")}, a.env...)
	if a.stdin != "" {
		c.Stdin = strings.NewReader(a.stdin)
	}
	return c
}

func (a *ak) run(args ...string) result {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := a.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			a.t.Fatalf("agentkernel %v: %v", args, err)
		}
		r.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			a.t.Fatalf("agentkernel %v died of %v; stderr:\n%s", args, ws.Signal(), r.stderr)
		}
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		a.t.Fatalf("agentkernel %v printed a Go stack trace:\n%s", args, r.stderr)
	}
	return r
}

func (r result) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout: %q\nstderr: %q", r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}
