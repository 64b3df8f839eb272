//go:build linux

package kubelab

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// Shared is one API server for a test binary: RunTests starts it around
// the tests (starting one takes seconds), Get hands it to a test.
type Shared struct {
	lab     *Lab
	err     error
	missing bool
}

// RunTests starts the API server (when the binaries are built), runs
// the tests, stops it and removes its files; it returns m.Run's code.
func (s *Shared) RunTests(m *testing.M) int {
	bin, ok := Dir()
	if !ok {
		s.missing = true
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "kubelab-")
	if err != nil {
		s.err = err
		return m.Run()
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	s.lab, s.err = Start(ctx, bin, dir)
	cancel()
	if s.lab != nil {
		defer s.lab.Close()
	}
	return m.Run()
}

// Get returns the running API server, or ends t: testenv.Missing when
// the binaries are not built, a failure when the server did not start.
func (s *Shared) Get(t testing.TB) *Lab {
	t.Helper()
	if s.missing {
		testenv.Missing(t, "%s", MissingHint)
	}
	if s.err != nil {
		t.Fatalf("kube-apiserver: %v", s.err)
	}
	return s.lab
}
