// Package testbin builds the agentkernel binaries (agentkernel and, beside
// it, agentkernel-full) once for a test package's TestMain, statically
// (CGO_ENABLED=0) as they ship, in a directory of their own so that its
// path identifies the test's processes.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// Main builds agentkernel and agentkernel-full into a fresh temporary
// directory (named after prefix), sets *binary to agentkernel's path, runs the tests and removes the
// directory. It never returns. Packages that need root say so in why:
// when not root they skip (exit 0), or, under the test suite
// (internal/testenv's strict mode), fail.
func Main(run func() int, binary *string, prefix, why string) {
	if why != "" && os.Geteuid() != 0 {
		if testenv.Strict() {
			fmt.Printf("FAIL: %s: cannot run: %s, and this is not root (%s=1: a missing prerequisite is a failure)\n", prefix, why, testenv.StrictEnv)
			os.Exit(1)
		}
		fmt.Printf("%s: skipped, %s (run as root, as CI does)\n", prefix, why)
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "ak-"+prefix+"-")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	*binary = filepath.Join(dir, "agentkernel")
	build := exec.Command("go", "build", "-o", dir+"/", "github.com/agentkernel/agentkernel/cmd/agentkernel", "github.com/agentkernel/agentkernel/cmd/agentkernel-full")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("building agentkernel: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Full is agentkernel-full for one test: $AGENTKERNEL_FULL when set,
// else built from this tree into a temporary directory of t.
func Full(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AGENTKERNEL_FULL"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "agentkernel-full")
	build := exec.Command("go", "build", "-o", out, "github.com/agentkernel/agentkernel/cmd/agentkernel-full")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build agentkernel-full: %v\n%s", err, b)
	}
	return out
}
