package runcli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// leanRunApp is the App of the agentkernel binary (cmd/agentkernel): the
// native backend and gvisor's only (PartialBackends), warnings held,
// none of agentkernel-full's hooks.
func leanRunApp(stdout, stderr *bytes.Buffer) *App {
	a := &App{Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr, HoldWarnings: true, PartialBackends: true}
	a.MoreBackends = func() []sandbox.Backend {
		return []sandbox.Backend{gvisor.New(gvisor.Options{DataDir: a.DataDir, Warn: func(s string) { a.Warnf("%s", s) }})}
	}
	return a
}

// TestPartialBackends: the agentkernel binary serves runs on native and
// gvisor, and a run on any other backend, named by -B or by [sandbox]
// backend, answers ErrNeedsFull (agentkernel-full serves it or refuses
// it in its own words) with nothing printed; so does everything else
// that is agentkernel-full's on a gvisor run (secrets, receipts,
// persistent sandboxes).
func TestPartialBackends(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir+"/config")
	t.Setenv("AGENTKERNEL_NO_DAEMON", "1")
	cfg := filepath.Join(dir, "agentkernel.toml")
	// An unknown key: every run that loads the configuration warns.
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte("bogus_key = 1\n"+s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(argv ...string) (string, string, error) {
		t.Helper()
		var out, errb bytes.Buffer
		a := leanRunApp(&out, &errb)
		a.DataDir = filepath.Join(dir, "data")
		err := a.Execute(argv)
		if !errors.Is(err, ErrNeedsFull) {
			a.FlushWarnings()
		}
		return out.String(), errb.String(), err
	}
	dry := []string{"run", "--dry-run", "-i", "alpine:3.20"}

	write("")
	for _, b := range []string{"gvisor", "GVisor", "native", ""} {
		argv := append(append([]string{}, dry...), "-B", b, "--", "true")
		out, errs, err := run(argv...)
		if err != nil || !strings.Contains(out, `"alpine:3.20"`) || strings.Count(errs, "bogus_key") != 1 {
			t.Errorf("-B %q: %v, stdout %q, stderr %q; want the spec and one warning", b, err, out, errs)
		}
	}
	for _, b := range []string{"docker", "podman", "auto", "AUTO", "nomad", "kubernetes", "chroot", " gvisor", "gvisor ", "gvisor\x00", "native ", "../gvisor"} {
		argv := append(append([]string{}, dry...), "-B", b, "--", "true")
		out, errs, err := run(argv...)
		if !errors.Is(err, ErrNeedsFull) || out != "" || errs != "" {
			t.Errorf("-B %q: %v, stdout %q, stderr %q; want ErrNeedsFull and nothing printed", b, err, out, errs)
		}
		// Not a dry run: the same, before anything runs.
		if _, _, err := run("run", "-i", "alpine:3.20", "-B", b, "--", "true"); !errors.Is(err, ErrNeedsFull) {
			t.Errorf("run -B %q: %v, want ErrNeedsFull", b, err)
		}
	}

	// What is agentkernel-full's on gvisor too.
	for _, flags := range [][]string{
		{"-S", "K:example.test"},
		{"--secret-file", "K"},
		{"--receipt", filepath.Join(dir, "r.json")},
		{"--name", "box"},
		{"--keep"},
		{"--branch"},
		{"--pull", "always"},
	} {
		argv := append(append([]string{"run", "-i", "alpine:3.20", "-B", "gvisor"}, flags...), "--", "true")
		out, errs, err := run(argv...)
		if !errors.Is(err, ErrNeedsFull) || out != "" || errs != "" {
			t.Errorf("-B gvisor %v: %v, stdout %q, stderr %q; want ErrNeedsFull and nothing printed", flags, err, out, errs)
		}
	}

	// [sandbox] backend of the configuration, as -B.
	for _, c := range []struct {
		backend string
		served  bool
	}{{"gvisor", true}, {"GVISOR", true}, {"native", true}, {"docker", false}, {"podman", false}, {"auto", false}} {
		write("[sandbox]\nbackend = \"" + c.backend + "\"\n")
		out, errs, err := run(append(append([]string{}, dry...), "--", "true")...)
		switch {
		case c.served && (err != nil || !strings.Contains(out, `"alpine:3.20"`) || strings.Count(errs, "bogus_key") != 1):
			t.Errorf("backend = %q: %v, stdout %q, stderr %q; want the spec and one warning", c.backend, err, out, errs)
		case !c.served && (!errors.Is(err, ErrNeedsFull) || out != "" || errs != ""):
			t.Errorf("backend = %q: %v, stdout %q, stderr %q; want ErrNeedsFull and nothing printed", c.backend, err, out, errs)
		}
	}
}

// TestAllBackends: an App whose MoreBackends are all there are
// (agentkernel-full's) serves or refuses every backend name itself:
// none is ErrNeedsFull.
func TestAllBackends(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir+"/config")
	for _, b := range []string{"gvisor", "docker", "chroot", " gvisor"} {
		var out, errb bytes.Buffer
		a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, DataDir: filepath.Join(dir, "data")}
		a.MoreBackends = func() []sandbox.Backend { return []sandbox.Backend{gvisor.New(gvisor.Options{DataDir: a.DataDir})} }
		o, set, args, err := a.ParseRun([]string{"run", "--dry-run", "-i", "alpine:3.20", "-B", b, "--", "true"})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.RunCommand(context.Background(), o, set, args); errors.Is(err, ErrNeedsFull) {
			t.Errorf("-B %q: ErrNeedsFull from an App with all its backends", b)
		}
	}
}
