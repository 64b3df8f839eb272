//go:build linux

package nomad

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
	"github.com/agentkernel/agentkernel/internal/testenv/nomadlab"
)

// startLab runs a real Nomad dev agent for the test, torn down after it.
func startLab(t testing.TB) *nomadlab.Lab {
	t.Helper()
	testenv.RequireRoot(t) // raw_exec and the exec driver run tasks as root
	bin, ok := nomadlab.Binary()
	if !ok {
		testenv.Missing(t, "%s", nomadlab.MissingHint)
	}
	dir, err := os.MkdirTemp("", "nomadlab-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := nomadlab.Start(ctx, bin, dir)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if t.Failed() {
			t.Logf("nomad agent log:\n%s", l.Log())
		}
		os.RemoveAll(dir)
	})
	return l
}

func newBackend(t testing.TB, l *nomadlab.Lab, o Options) *Backend {
	t.Helper()
	o.Address = l.Address
	b, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cleanupJob purges a sandbox's job at the end of the test, so that the
// agent's Close finds no task running.
func cleanupJob(t testing.TB, b *Backend, name string) {
	t.Cleanup(func() {
		_, _, _ = b.client.Jobs().Deregister(JobID(name), true, nil)
	})
}

// nodeDataDir is the node agentkernel's --data-dir for a test. Its
// cleanup (which runs after the jobs' purges, registered later) waits
// for the tasks' exits to remove their native sandboxes, then removes it.
func nodeDataDir(t testing.TB, ak string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nomad-node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nomadlab.RemoveNodeData(ak, dir); err != nil {
			t.Errorf("node data dir: %v", err)
		}
	})
	return dir
}
