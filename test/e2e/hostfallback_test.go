//go:build linux

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentkernel/agentkernel/pkg/client"
)

// TestHostImageToolchain runs the host's Go through the host image: its
// bin is on PATH, HOME exists and is writable, so `go test` works.
func TestHostImageToolchain(t *testing.T) {
	if fi, err := os.Stat("/usr/local/go/bin/go"); err != nil || fi.IsDir() {
		t.Skip("no Go toolchain at /usr/local/go on this host")
	}
	a := newAK(t)
	files := map[string]string{
		"go.mod":         "module example.com/tiny\n\ngo 1.21\n",
		"tiny.go":        "package tiny\n\nfunc Add(a, b int) int { return a + b }\n",
		"tiny_test.go":   "package tiny\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"2+3\")\n\t}\n}\n",
		"tinyno_test.go": "package tiny\n\nimport \"testing\"\n\nfunc TestMarker(t *testing.T) { t.Log(\"tiny-module-tested\") }\n",
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(a.dir, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := a.run("-q", "run", "--image", "host", "--", "go", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "go version go") {
		t.Fatalf("go version through --image host: %v", r)
	}
	r = a.run("-q", "run", "--image", "host", "--", "sh", "-c", `echo hi > "$HOME/x" && cat "$HOME/x" && echo "home=$HOME"`)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "hi\nhome=/") {
		t.Fatalf("writing $HOME through --image host: %v", r)
	}
	// A cold build cache compiles the testing package's dependencies:
	// give it more than a.run's minute on a loaded machine.
	r = runLong(a, 5*time.Minute, "-q", "run", "--timeout", "5m", "--image", "host", "--", "go", "test", "-v", "-count=1", "./...")
	if r.code != 0 || !strings.Contains(r.stdout, "tiny-module-tested") || !strings.Contains(r.stdout, "ok  \texample.com/tiny") {
		t.Fatalf("go test through --image host: %v", r)
	}
}

// TestHostFallbackRecorded: a sandbox whose detected image could not be
// had runs the host's tools, and says so wherever it is shown: list,
// info, --json, and beforehand in detect and --dry-run.
func TestHostFallbackRecorded(t *testing.T) {
	a := newAK(t)
	// Nothing is cached and Docker Hub is not reachable from a test:
	// alpine:3.20 (detected for sh) falls back to the host's tools.
	r := a.run("detect", "sh")
	if r.code != 0 || !strings.Contains(r.stdout, "alpine:3.20") || !strings.Contains(r.stdout, "falls back to the host") {
		t.Fatalf("detect must mention the fallback of an uncached image: %v", r)
	}
	r = a.run("detect", "--image", "alpine:3.20", "sh")
	if r.code != 0 || strings.Contains(r.stdout, "falls back") {
		t.Fatalf("detect must not promise a fallback for a named image: %v", r)
	}
	r = a.run("run", "--dry-run", "--", "sh", "-c", "true")
	if r.code != 0 || !strings.Contains(r.stderr, "alpine:3.20 is not cached") || !strings.Contains(r.stderr, "host") {
		t.Fatalf("--dry-run must mention the fallback: %v", r)
	}

	const name = "fallbackbox"
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", name) })
	r = a.run("sandbox", "create", name, "--start")
	if r.code != 0 {
		t.Fatalf("sandbox create: %v", r)
	}
	r = a.run("sandbox", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "host (fallback for alpine:3.20)") {
		t.Fatalf("sandbox list must show the fallback: %v", r)
	}
	r = a.run("sandbox", "info", name)
	if r.code != 0 || !strings.Contains(r.stdout, "host (fallback for alpine:3.20)") {
		t.Fatalf("sandbox info must show the fallback: %v", r)
	}
	r = a.run("sandbox", "info", name, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"image": "host"`) || !strings.Contains(r.stdout, `"requested_image": "alpine:3.20"`) {
		t.Fatalf("sandbox info --json must record image host and the requested image: %v", r)
	}
}

// runLong is a.run with a longer limit.
func runLong(a *ak, limit time.Duration, args ...string) result {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c := a.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	start := time.Now()
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		a.t.Fatalf("agentkernel %v: %v", args, err)
	}
	return r
}

// TestMCPHostFallbackRecorded: sandbox_create answers with what runs,
// not with the image it could not have.
func TestMCPHostFallbackRecorded(t *testing.T) {
	a := newAK(t)
	s := mcpSession(t, a, nil)
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "mcpfallback") })
	out := mustCall(t, s, "sandbox_create", map[string]any{"name": "mcpfallback"})
	if !strings.Contains(out, "with image 'host'") || !strings.Contains(out, "alpine:3.20") || strings.Contains(out, "with image 'alpine:3.20'") {
		t.Errorf("sandbox_create after a host fallback: %q", out)
	}
	if out := mustCall(t, s, "sandbox_list", nil); !strings.Contains(out, "host (fallback for alpine:3.20)") {
		t.Errorf("sandbox_list after a host fallback: %q", out)
	}
}

// TestAPIHostFallbackRecorded: the HTTP API's sandbox objects say what
// runs (image "host") and what was asked for (requested_image), in the
// answers of create, get and list, on the wire and through the Go
// client; a sandbox that got its image has no requested_image.
func TestAPIHostFallbackRecorded(t *testing.T) {
	s := startAPI(t, "--api-key", apiKey)
	t.Cleanup(func() {
		s.a.run("sandbox", "rm", "--force", "apifallback")
		s.a.run("sandbox", "rm", "--force", "apihost")
	})
	r := s.raw("POST", "/sandboxes", `{"name":"apifallback"}`)
	if r.status != 201 || !strings.Contains(string(r.env["data"]), `"image":"host","requested_image":"alpine:3.20"`) {
		t.Fatalf("create after a host fallback: %d %s", r.status, r.body)
	}
	c := s.client(apiKey)
	ctx := t.Context()
	if sb, err := c.GetSandbox(ctx, "apifallback"); err != nil || sb.Image != "host" || sb.RequestedImage != "alpine:3.20" {
		t.Errorf("get: %+v %v", sb, err)
	}
	hostSB, err := c.CreateSandbox(ctx, client.CreateOptions{Name: "apihost", Image: "host"})
	if err != nil || hostSB.Image != "host" || hostSB.RequestedImage != "" {
		t.Fatalf("create with image host: %+v %v", hostSB, err)
	}
	list, err := c.ListSandboxes(ctx, nil)
	got := map[string]string{}
	for _, sb := range list {
		got[sb.Name] = sb.Image + "/" + sb.RequestedImage
	}
	if err != nil || got["apifallback"] != "host/alpine:3.20" || got["apihost"] != "host/" {
		t.Errorf("list: %v %v", got, err)
	}
	if r := s.raw("GET", "/sandboxes/apihost", ""); strings.Contains(string(r.body), "requested_image") {
		t.Errorf("a sandbox that got its image: %s", r.body)
	}
}

// TestNoFallbackNoteWhenCached: an image in the cache never falls back,
// so detect and --dry-run do not say it might.
func TestNoFallbackNoteWhenCached(t *testing.T) {
	a := newAK(t)
	tag, err := name.NewTag("alpine:3.20")
	if err != nil {
		t.Fatal(err)
	}
	tarPath := filepath.Join(t.TempDir(), "alpine.tar")
	if err := tarball.WriteToFile(tarPath, tag, testImage(t, "cached-alpine")); err != nil {
		t.Fatal(err)
	}
	if r := a.run("images", "load", "-i", tarPath); r.code != 0 {
		t.Fatalf("images load: %v", r)
	}
	if r := a.run("detect", "sh"); r.code != 0 || !strings.Contains(r.stdout, "alpine:3.20") || strings.Contains(r.stdout, "falls back") {
		t.Fatalf("detect of a cached image: %v", r)
	}
	if r := a.run("run", "--dry-run", "--", "sh", "-c", "true"); r.code != 0 || strings.Contains(r.stderr, "falls back") {
		t.Fatalf("--dry-run of a cached image: %v", r)
	}
}
