package daemon

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// envPeerClient makes this test binary a client of the run socket it
// names: it asks for one run with its own stdio and prints "ok" or the
// daemon's error.
const envPeerClient = "AKDAEMON_TEST_PEER_CLIENT"

func TestMain(m *testing.M) {
	if sock := os.Getenv(envPeerClient); sock != "" {
		c := NewClient(sock)
		defer c.Close()
		if _, err := c.Run(&sandbox.Spec{Args: []string{"true"}}, os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Println(err)
		} else {
			fmt.Println("ok")
		}
		return
	}
	os.Exit(m.Run())
}

// TestRunSocketPeerNamespaces: the run socket serves a client of our uid
// only from our own user and PID namespaces. The same client in a new
// user namespace that maps its root to our uid (a rootless sandbox: the
// kernel reports our uid for it) or in a new PID namespace is refused
// with a reply that says why, and nothing runs.
func TestRunSocketPeerNamespaces(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "run.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	h := Handler{
		Build: BuildID(),
		Run: func(context.Context, *sandbox.Spec, sandbox.Stdio, <-chan os.Signal, func(string)) (sandbox.Result, string, error) {
			ran.Add(1)
			return sandbox.Result{}, "hit", nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { Serve(ctx, ln, h); close(served) }()
	defer func() { cancel(); <-served }()

	client := func(attr *syscall.SysProcAttr) string {
		t.Helper()
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envPeerClient+"="+sock)
		cmd.SysProcAttr = attr
		out, err := cmd.CombinedOutput()
		if err != nil {
			if attr != nil && strings.Contains(err.Error(), "fork/exec") {
				testenv.Missing(t, "starting a client in new namespaces: %v", err)
			}
			t.Fatalf("client: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := client(nil); got != "ok" || ran.Load() != 1 {
		t.Fatalf("a client in our namespaces: %q (runs: %d)", got, ran.Load())
	}
	for name, flags := range testenv.OtherNamespaces {
		t.Run(name, func(t *testing.T) {
			attr := testenv.InNamespaces(t, flags)
			before := ran.Load()
			if got := client(attr); !strings.Contains(got, "permission denied") || !strings.Contains(got, "own user and PID namespaces") {
				t.Errorf("a client in a new %s namespace: %q, want a refusal naming the namespaces", name, got)
			}
			if ran.Load() != before {
				t.Errorf("a client in a new %s namespace had its command run", name)
			}
		})
	}
}
