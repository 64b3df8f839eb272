//go:build linux

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
	"github.com/agentkernel/agentkernel/internal/testenv/nomadlab"
)

// startNomadNode starts a Nomad dev agent for t (missing: testenv.Missing)
// whose raw_exec tasks run this tree's agentkernel-full as the node's,
// and returns it, that binary's path and a data directory for the node's
// sandboxes. When t ends the node's data directory goes once its
// sandboxes and their tasks are gone, then the agent (its log in t's
// output if t failed) and its directory.
func startNomadNode(t *testing.T) (l *nomadlab.Lab, full, nodeData string) {
	t.Helper()
	testenv.RequireRoot(t)
	bin, ok := nomadlab.Binary()
	if !ok {
		testenv.Missing(t, "%s", nomadlab.MissingHint)
	}
	dir, err := os.MkdirTemp("", "nomadlab-")
	if err != nil {
		t.Fatal(err)
	}
	l, err = nomadlab.Start(context.Background(), bin, dir)
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
	if nodeData, err = os.MkdirTemp("", "nomad-node-"); err != nil {
		t.Fatal(err)
	}
	full = filepath.Join(filepath.Dir(binary), "agentkernel-full")
	t.Cleanup(func() { _ = nomadlab.RemoveNodeData(full, nodeData) })
	return l, full, nodeData
}
