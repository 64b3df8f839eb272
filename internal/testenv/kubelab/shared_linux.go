//go:build linux

package kubelab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentkernel/agentkernel/internal/image/imagetest"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestImage is the image the shared node holds besides PauseImage: the
// busybox userland of imagetest.BusyboxImage.
const TestImage = "agentkernel.test/busybox:1"

// Shared is one API server for a test binary: RunTests starts it around
// the tests (starting one takes seconds), Get hands it to a test.
//
// Node hands out a second API server with a node, started the first time
// a test asks for one, stopped by RunTests after the tests. It is a
// cluster of its own so that the pods the other tests leave Pending on
// the first (they only look at API objects) are never scheduled, and do
// not fill the node.
type Shared struct {
	lab     *Lab
	err     error
	missing bool
	bin     string

	nodeMu  sync.Mutex
	nodeLab *Lab
	node    *Node
	nodeErr error
	nodeDir string
}

// Node returns the cluster with a node, starting it on the first call
// (with PauseImage and TestImage in the node's store), or ends t:
// testenv.Missing when something it needs is not installed, a failure
// when it did not start.
func (s *Shared) Node(t testing.TB) (*Lab, *Node) {
	t.Helper()
	s.Get(t)
	if m := NodeReady(s.bin); len(m) > 0 {
		testenv.Missing(t, "missing %s: %s", strings.Join(m, ", "), NodeMissingHint)
	}
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	if s.node == nil && s.nodeErr == nil {
		images := map[string]v1.Image{PauseImage: PauseImageFor(t), TestImage: imagetest.BusyboxImage(t)}
		// A short path: containerd's socket lives in it.
		s.nodeDir, s.nodeErr = os.MkdirTemp("", "kln-")
		if s.nodeErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			s.nodeErr = os.Mkdir(filepath.Join(s.nodeDir, "api"), 0o700)
			if s.nodeErr == nil {
				s.nodeLab, s.nodeErr = Start(ctx, s.bin, filepath.Join(s.nodeDir, "api"))
			}
			if s.nodeErr == nil {
				s.nodeErr = os.Mkdir(filepath.Join(s.nodeDir, "n"), 0o700)
			}
			if s.nodeErr == nil {
				s.node, s.nodeErr = s.nodeLab.StartNode(ctx, s.bin, filepath.Join(s.nodeDir, "n"), images)
			}
		}
	}
	if s.nodeErr != nil {
		t.Fatalf("node: %v", s.nodeErr)
	}
	return s.nodeLab, s.node
}

// PauseImageFor is a pause image: busybox's sleep, forever.
func PauseImageFor(t testing.TB) v1.Image {
	t.Helper()
	return imagetest.Image(t, v1.Config{Entrypoint: []string{"/bin/sleep", "infinity"}}, imagetest.Layer(t, imagetest.BusyboxFiles(t)...))
}

// closeNode stops the node (if one started) and reports what it left.
func (s *Shared) closeNode() error {
	if s.nodeDir == "" {
		return nil
	}
	defer os.RemoveAll(s.nodeDir)
	if s.nodeLab != nil {
		defer s.nodeLab.Close()
	}
	if s.node == nil {
		return nil
	}
	s.node.Close()
	if left := s.node.Leftovers(); len(left) > 0 {
		return fmt.Errorf("the node left behind: %s", strings.Join(left, ", "))
	}
	return nil
}

// RunTests starts the API server (when the binaries are built), runs
// the tests, stops it and removes its files; it returns m.Run's code.
func (s *Shared) RunTests(m *testing.M) int {
	bin, ok := Dir()
	if !ok {
		s.missing = true
		return m.Run()
	}
	s.bin = bin
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
	code := m.Run()
	if err := s.closeNode(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
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
