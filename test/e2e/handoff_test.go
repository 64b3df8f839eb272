//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHandOff: the agentkernel binary runs cached images by itself and
// hands every other command line, and a run whose image must be pulled,
// to agentkernel-full beside it. Either way the user sees one set of
// warnings and one result; without agentkernel-full, runs of cached images
// still work and everything else says what is missing.
func TestHandOff(t *testing.T) {
	a, ref := withRegistry(t)
	// An unknown key makes every run warn once.
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("bogus_key = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	warnedOnce := func(what string, r result) {
		t.Helper()
		if n := strings.Count(r.stderr, `unknown key "bogus_key"`); n != 1 {
			t.Errorf("%s: the config warning was printed %d times: %v", what, n, r)
		}
	}
	// Not cached: agentkernel hands the run to agentkernel-full, which
	// pulls and runs it.
	r := a.run("run", "--image", ref, "--", "cat", "/etc/agentkernel-test")
	if r.code != 0 || r.stdout != "registry\n" {
		t.Fatalf("run that pulls: %v", r)
	}
	warnedOnce("run that pulls", r)

	// Now agentkernel alone, in a directory without agentkernel-full.
	lone := filepath.Join(t.TempDir(), "agentkernel")
	b, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	a.bin = lone
	r = a.run("run", "--image", ref, "--", "sh", "-c", "cat /etc/agentkernel-test; exit 7")
	if r.code != 7 || r.stdout != "registry\n" {
		t.Fatalf("cached run without agentkernel-full: %v", r)
	}
	warnedOnce("cached run", r)
	if r = a.run("run", "--dry-run", "--image", ref, "--", "true"); r.code != 0 || !strings.Contains(r.stdout, `"image"`) {
		t.Errorf("--dry-run without agentkernel-full: %v", r)
	}
	warnedOnce("--dry-run", r)
	if r = a.run("run", "--help"); r.code != 0 || !strings.Contains(r.stdout, "--image") {
		t.Errorf("run --help without agentkernel-full: %v", r)
	}
	// A copy of agentkernel installed as agentkernel-full must not hand
	// command lines to itself for ever.
	if err := os.WriteFile(filepath.Join(filepath.Dir(lone), "agentkernel-full"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"images", "list"}, {"run", "--pull", "always", "--image", ref, "--", "true"}} {
		r = a.run(args...)
		if r.code != 125 || !strings.Contains(r.stderr, "is a copy of the agentkernel binary, not agentkernel-full") {
			t.Errorf("%v with a copy of agentkernel as agentkernel-full: %v", args, r)
		}
	}
	if err := os.Remove(filepath.Join(filepath.Dir(lone), "agentkernel-full")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"images", "list"},
		{"version"},
		{"run", "--pull", "always", "--image", ref, "--", "true"},
		{"run", "--image", "127.0.0.1:1/not-cached:1", "--", "true"},
	} {
		r = a.run(args...)
		if r.code != 125 || !strings.Contains(r.stderr, "needs agentkernel-full, which is not installed beside") ||
			!strings.Contains(r.stderr, "hint: ") || r.stdout != "" {
			t.Errorf("%v without agentkernel-full: %v", args, r)
		}
		if strings.Contains(r.stderr, "bogus_key") {
			t.Errorf("%v: a run that was not served printed its warnings: %v", args, r)
		}
	}
}
