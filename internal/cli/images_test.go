//go:build linux

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/image/imagetest"
)

// runImagesCLI runs `agentkernel --data-dir DIR args...`.
func runImagesCLI(t *testing.T, dataDir string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	a := NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	root := NewRootCommand(a)
	root.SetArgs(append([]string{"--data-dir", dataDir}, args...))
	err := root.Execute()
	return out.String(), errb.String(), err
}

func TestImagesCommands(t *testing.T) {
	reg := imagetest.NewRegistry(t)
	ref := reg.Push(t, "tools/app:1", imagetest.Image(t, v1.Config{Cmd: []string{"/app"}},
		imagetest.Layer(t, imagetest.Reg("app", "#!/bin/sh\n")), imagetest.Layer(t, imagetest.Reg("data", strings.Repeat("x", 5000)))))
	dir := t.TempDir()

	out, errOut, err := runImagesCLI(t, dir, "images", "pull", ref)
	if err != nil {
		t.Fatalf("pull: %v\n%s", err, errOut)
	}
	if !strings.HasPrefix(out, ref+"@sha256:") {
		t.Fatalf("pull stdout: %q", out)
	}
	if !strings.Contains(errOut, "pulling "+ref+": 2 layers") || !strings.Contains(errOut, "done in") {
		t.Fatalf("pull progress: %q", errOut)
	}
	_, errOut, err = runImagesCLI(t, dir, "-q", "images", "pull", ref)
	if err != nil || errOut != "" {
		t.Fatalf("quiet pull: %v %q", err, errOut)
	}

	out, _, err = runImagesCLI(t, dir, "images", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "REPOSITORY") || !strings.Contains(lines[0], "PULLED") {
		t.Fatalf("list:\n%s", out)
	}
	fields := strings.Fields(lines[1])
	if fields[0] != reg.Host+"/tools/app" || fields[1] != "1" || !strings.HasPrefix(fields[2], "sha256:") || fields[4] != "kB" || fields[5] != "just" {
		t.Fatalf("list row: %q", lines[1])
	}

	out, _, err = runImagesCLI(t, dir, "images", "inspect", ref)
	if err != nil {
		t.Fatal(err)
	}
	var details []image.ImageDetails
	if err := json.Unmarshal([]byte(out), &details); err != nil || len(details) != 1 || len(details[0].Layers) != 2 || details[0].Config.Cmd[0] != "/app" {
		t.Fatalf("inspect: %v\n%s", err, out)
	}

	tarPath := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(tarPath, imagetest.TarBytes(t, imagetest.Reg("etc/os-release", "ID=x\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err = runImagesCLI(t, dir, "images", "import", tarPath, "local/rootfs:2")
	if err != nil || !strings.HasPrefix(out, "index.docker.io/local/rootfs:2@sha256:") {
		t.Fatalf("import: %q %v", out, err)
	}
	out, _, _ = runImagesCLI(t, dir, "images", "ls")
	if !strings.Contains(out, "local/rootfs ") {
		t.Fatalf("list after import:\n%s", out)
	}

	out, _, err = runImagesCLI(t, dir, "images", "rm", ref, "local/rootfs:2")
	if err != nil || strings.Count(out, "Deleted: sha256:") != 2 {
		t.Fatalf("rm: %q %v", out, err)
	}
	out, _, err = runImagesCLI(t, dir, "images", "prune")
	if err != nil || !strings.HasPrefix(out, "Removed 3 layers") {
		t.Fatalf("prune: %q %v", out, err)
	}

	_, _, err = runImagesCLI(t, dir, "images", "inspect", ref)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !errors.Is(err, image.ErrNotFound) || ee.Hint == "" {
		t.Fatalf("inspect missing: %v", err)
	}
	_, _, err = runImagesCLI(t, dir, "images", "load")
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "-i FILE") {
		t.Fatalf("load without -i: %v", err)
	}
	_, _, err = runImagesCLI(t, dir, "images", "pull")
	if !errors.As(err, &ee) {
		t.Fatalf("pull without ref: %v", err)
	}
	out, _, err = runImagesCLI(t, dir, "images", "--help")
	if err != nil || !strings.Contains(out, "images pull alpine:3.20") {
		t.Fatalf("help: %v\n%s", err, out)
	}
}
