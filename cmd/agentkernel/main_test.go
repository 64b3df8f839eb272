package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestRunPathDependencies keeps the agentkernel binary lean: the packages
// only other commands need (registry client, TLS, SQLite, the HTTP and
// MCP servers, progress bars) must stay in agentkernel-full, since a Go
// binary runs the init of every package it links on every start, and
// every 'agentkernel run' and 'agentkernel exec' would pay for them.
func TestRunPathDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "no go command in PATH")
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	banned := []string{
		"github.com/google/go-containerregistry/",
		"github.com/klauspost/compress",
		"github.com/vbauerster/mpb",
		"github.com/modelcontextprotocol/",
		"github.com/google/jsonschema-go",
		"modernc.org/",
		"net/http",
		"crypto/tls",
		"encoding/gob",
		// The command tree: a run's command line is parsed with pflag
		// alone (runcli.App.Execute).
		"github.com/spf13/cobra",
		"text/template",
		"regexp",
		"github.com/agentkernel/agentkernel/internal/cli",
		"github.com/agentkernel/agentkernel/internal/image",
		"github.com/agentkernel/agentkernel/internal/api",
		"github.com/agentkernel/agentkernel/internal/mcp",
		"github.com/agentkernel/agentkernel/internal/store",
		"github.com/agentkernel/agentkernel/internal/supervisor",
		// The backends besides native and gvisor (docker's and podman's
		// engine API, Nomad, Kubernetes) are agentkernel-full's.
		"github.com/agentkernel/agentkernel/internal/backend",
	}
	allowed := map[string]bool{
		"github.com/agentkernel/agentkernel/internal/cli/runcli":  true,
		"github.com/agentkernel/agentkernel/internal/image/cache": true,
		// gvisor's backend only executes runsc, and links nothing of
		// gVisor: its runs are served here (it must not bring regexp,
		// banned above, nor anything else with it).
		"github.com/agentkernel/agentkernel/internal/backend/gvisor":   true,
		"github.com/agentkernel/agentkernel/internal/backend/bootprep": true,
	}
	// The native backend and its packages.
	const native = "github.com/agentkernel/agentkernel/internal/backend/native"
	for _, d := range deps {
		if allowed[d] || d == native || strings.HasPrefix(d, native+"/") {
			continue
		}
		for _, b := range banned {
			if d == b || strings.HasPrefix(d, b) && (strings.HasSuffix(b, "/") || strings.HasPrefix(d[len(b):], "/")) {
				t.Errorf("agentkernel links %s (banned: %s); only agentkernel-full may", d, b)
			}
		}
	}
	// exec, attach, cp and stats are served here, over the sandboxes'
	// directories (not the supervisor's state store, banned above).
	if !strings.Contains(string(out), "github.com/agentkernel/agentkernel/internal/sandboxdir\n") {
		t.Error("agentkernel does not link internal/sandboxdir: exec and stats would go to agentkernel-full")
	}
	// run -B gvisor is served here too.
	if !strings.Contains(string(out), "github.com/agentkernel/agentkernel/internal/backend/gvisor\n") {
		t.Error("agentkernel does not link internal/backend/gvisor: run -B gvisor would go to agentkernel-full")
	}
	// The check itself: the whole command line does link them.
	full, err := exec.Command(goBin, "list", "-deps", "../agentkernel-full").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, want := range []string{"github.com/google/go-containerregistry/pkg/v1/remote", "modernc.org/sqlite", "github.com/agentkernel/agentkernel/internal/cli", "github.com/agentkernel/agentkernel/internal/backend/engine", "regexp"} {
		if !strings.Contains(string(full), want+"\n") {
			t.Errorf("agentkernel-full does not link %s: the banned list above is stale", want)
		}
	}
}
