package sandbox

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestNoBackendImports keeps the arrows pointing one way: this package
// (the vocabulary, and every package below it), the supervisor and the
// agent protocol never import a backend, on any system. What they need of
// one is declared here (Booter, Instance, Reclaimer, Meter, Backend) and
// the faces wire a backend in, so that another backend can host
// persistent sandboxes under the same supervisor and agent.
func TestNoBackendImports(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		testenv.Missing(t, "no go command in PATH")
	}
	const (
		internal = "github.com/agentkernel/agentkernel/internal/"
		backends = internal + "backend"
	)
	isBackend := func(p string) bool { return p == backends || strings.HasPrefix(p, backends+"/") }
	// Each package these link, with what it imports.
	list := func(goos string, pkgs ...string) map[string][]string {
		t.Helper()
		cmd := exec.Command(goBin, append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, pkgs...)...)
		cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list (GOOS=%s): %v", goos, err)
		}
		deps := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 {
				deps[f[0]] = f[1:]
			}
		}
		return deps
	}
	for _, goos := range []string{"linux", "darwin"} {
		deps := list(goos, ".", "../supervisor", "../agent")
		for _, want := range []string{internal + "sandbox", internal + "supervisor", internal + "agent"} {
			if _, ok := deps[want]; !ok {
				t.Fatalf("GOOS=%s: go list did not list %s: the check looks at the wrong packages", goos, want)
			}
		}
		for pkg, imports := range deps {
			for _, imp := range imports {
				if isBackend(imp) {
					t.Errorf("GOOS=%s: %s imports %s: sandbox, supervisor and agent (and what they import) must not import a backend; declare what is needed as an interface in package sandbox and wire the backend in from the face", goos, pkg, imp)
				}
			}
		}
	}
	// The check itself: the command line does link a backend, under the
	// prefix above.
	found := false
	for pkg := range list("linux", "../cli") {
		found = found || isBackend(pkg)
	}
	if !found {
		t.Errorf("package cli links no package under %s: the prefix this test looks for is stale", backends)
	}
}
