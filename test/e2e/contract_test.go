//go:build linux

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
	"github.com/agentkernel/agentkernel/internal/backend/gvisor"
	"github.com/agentkernel/agentkernel/internal/contract"
	"github.com/agentkernel/agentkernel/internal/testenv"
	"github.com/agentkernel/agentkernel/pkg/client"
)

// The contract tests: the same file-visibility, cp and HTTP API
// assertions against every backend the machine has, each backend the
// default of its configuration ([sandbox] backend), so that run,
// sandbox create and serve all take it. What a backend is known not to
// pass is in internal/contract with why; a case listed there must fail
// as listed, and one that passes fails the test until its row goes.

// contractCase is one named check of a suite: nil when it holds.
type contractCase struct {
	name string
	run  func() error
}

// withBackend is an agentkernel whose configuration makes backend the
// default, with the registry's test image pulled; a backend the machine
// lacks fails under the suite (testenv.Missing), skips elsewhere.
func withBackend(t *testing.T, backend string) (*ak, string) {
	t.Helper()
	a, ref := withRegistry(t)
	cfg := "[sandbox]\nbackend = \"" + backend + "\"\n"
	switch backend {
	case contract.Native:
	case contract.GVisor:
		testenv.RequireRoot(t)
		runsc := os.Getenv(gvisor.RunscEnv)
		if runsc == "" {
			runsc = gvisor.RunscCachePath()
		}
		if _, err := os.Stat(runsc); err != nil {
			testenv.Missing(t, "runsc not found (%v): scripts/runsc.sh builds it, or set %s", err, gvisor.RunscEnv)
		}
		a.env = append(a.env, gvisor.RunscEnv+"="+runsc)
	case contract.Docker, contract.Podman:
		testenv.RequireRoot(t)
		work, err := os.MkdirTemp("", "akc-"+backend+"-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(work) })
		start, env := harness.StartPrivateDocker, "DOCKER_HOST"
		if backend == contract.Podman {
			start, env = harness.StartPodmanService, "CONTAINER_HOST"
		}
		host, stop, err := start(work)
		if err != nil {
			testenv.Missing(t, "%s: %v", backend, err)
		}
		t.Cleanup(stop)
		a.env = append(a.env, env+"="+host)
		// The engines give no Landlock fence: runs go without it, as
		// allow_degraded lets them (the attack battery's difference).
		cfg += "[security]\nallow_degraded = [\"landlock\"]\n"
	default:
		t.Fatalf("no backend %q", backend)
	}
	p := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// Pulled once (the engines load it from the store on first use).
	if r := a.run("run", "--image", ref, "-p", "permissive", "--", "true"); r.code != 0 {
		t.Fatalf("%s: first run: %v", backend, r)
	}
	return a, ref
}

// checkContract runs each case and holds it to backend's differences in
// suite.
func checkContract(t *testing.T, backend, suite string, cases []contractCase) {
	t.Helper()
	names := map[string]bool{}
	for _, c := range cases {
		names[c.name] = true
	}
	for _, d := range contract.For(backend) {
		if d.Suite == suite && !names[d.Check] {
			t.Errorf("internal/contract: a %s row for %q, which is no case of the %s suite", backend, d.Check, suite)
		}
	}
	for _, c := range cases {
		start := time.Now()
		err := c.run()
		t.Logf("%s/%s: %v (%v)", backend, c.name, err, time.Since(start).Round(time.Millisecond))
		d, listed := contract.Lookup(backend, suite, c.name, "")
		switch {
		case err != nil && !listed:
			t.Errorf("%s/%s: %v", backend, c.name, err)
		case err == nil && listed:
			t.Errorf("%s/%s: passes, but internal/contract lists it as %s (%s): remove the row", backend, c.name, d.Want, d.Why)
		case listed:
			t.Logf("%s/%s: %s as listed (%s): %v", backend, c.name, d.Want, d.Why, err)
		}
	}
}

// contractBackends runs fn for each backend in a subtest
// (AGENTKERNEL_CONTRACT_BACKENDS=gvisor,docker limits them, for
// investigating).
func contractBackends(t *testing.T, fn func(t *testing.T, backend string)) {
	names := contract.Backends()
	if v := os.Getenv("AGENTKERNEL_CONTRACT_BACKENDS"); v != "" {
		names = strings.Split(v, ",")
	}
	for _, b := range names {
		t.Run(b, func(t *testing.T) { fn(t, b) })
	}
}

// TestFilesContract: what a sandbox sees of the project and what of its
// writes reaches the host, per profile, and cp in and out of a
// persistent sandbox, on every backend.
func TestFilesContract(t *testing.T) {
	contractBackends(t, func(t *testing.T, backend string) {
		a, ref := withBackend(t, backend)
		if err := os.WriteFile(filepath.Join(a.dir, "existing.txt"), []byte("project\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		expect := func(what string, r result, code int, stdout string) error {
			if r.code != code || r.stdout != stdout {
				return fmt.Errorf("%s: exit %d, stdout %q (want %d, %q); stderr %q", what, r.code, r.stdout, code, stdout, r.stderr)
			}
			return nil
		}
		const sb = "contract-files"
		t.Cleanup(func() { a.run("sandbox", "rm", "--force", sb) })
		cases := []contractCase{
			{"moderate: the project is visible, writes stay in the sandbox", func() error {
				r := a.run("run", "--image", ref, "--", "sh", "-c", "cat /workspace/existing.txt && echo new > /workspace/new.txt && echo changed > /workspace/existing.txt && cat /workspace/existing.txt /workspace/new.txt && pwd")
				if err := expect("run", r, 0, "project\nchanged\nnew\n/workspace\n"); err != nil {
					return err
				}
				if _, err := os.Stat(filepath.Join(a.dir, "new.txt")); !os.IsNotExist(err) {
					return fmt.Errorf("a file written in the sandbox reached the host (%v)", err)
				}
				if b, _ := os.ReadFile(filepath.Join(a.dir, "existing.txt")); string(b) != "project\n" {
					return fmt.Errorf("the host file changed to %q", b)
				}
				return nil
			}},
			{"permissive: writes reach the host project, owned by the caller", func() error {
				r := a.run("run", "--image", ref, "-p", "permissive", "--", "sh", "-c", "echo written > /workspace/perm.txt && cat /workspace/existing.txt")
				if err := expect("run", r, 0, "project\n"); err != nil {
					return err
				}
				p := filepath.Join(a.dir, "perm.txt")
				defer os.Remove(p)
				b, _ := os.ReadFile(p)
				if string(b) != "written\n" {
					return fmt.Errorf("the write did not reach the host: %q", b)
				}
				if uid := fileUID(p); uid != os.Getuid() {
					return fmt.Errorf("the file the sandbox wrote is host uid %d's, not the caller's (%d)", uid, os.Getuid())
				}
				return nil
			}},
			{"restrictive: no project, a read-only root, a writable /tmp", func() error {
				r := a.run("run", "--image", ref, "-p", "restrictive", "--", "sh", "-c", "ls /workspace 2>/dev/null && echo visible; touch /x 2>/dev/null && echo root-writable; touch /tmp/ok && echo tmp-ok")
				return expect("run", r, 0, "tmp-ok\n")
			}},
			{"a read-only volume is visible and refuses writes", func() error {
				r := a.run("run", "--image", ref, "-p", "permissive", "-v", a.dir+":/data:ro", "--", "sh", "-c", "cat /data/existing.txt; echo x > /data/existing.txt 2>/dev/null && echo writable; true")
				if err := expect("run", r, 0, "project\n"); err != nil {
					return err
				}
				if b, _ := os.ReadFile(filepath.Join(a.dir, "existing.txt")); string(b) != "project\n" {
					return fmt.Errorf("the host file changed to %q", b)
				}
				return nil
			}},
			{"cp into a sandbox and out again", func() error {
				if r := a.run("run", "--image", ref, "--name", sb, "-d"); r.code != 0 {
					return fmt.Errorf("run -d: %v", r)
				}
				if r := a.run("sandbox", "list", "--json"); !strings.Contains(strings.ReplaceAll(r.stdout, " ", ""), `"backend":"`+backend+`"`) {
					return fmt.Errorf("the sandbox is not on %s: %v", backend, r)
				}
				if r := a.run("cp", filepath.Join(a.dir, "existing.txt"), sb+":/tmp/in.txt"); r.code != 0 {
					return fmt.Errorf("cp in: %v", r)
				}
				if err := expect("exec", a.run("exec", sb, "--", "sh", "-c", "cat /tmp/in.txt; echo made > /tmp/out.txt"), 0, "project\n"); err != nil {
					return err
				}
				out := filepath.Join(a.home, "out.txt")
				if r := a.run("cp", sb+":/tmp/out.txt", out); r.code != 0 {
					return fmt.Errorf("cp out: %v", r)
				}
				if b, _ := os.ReadFile(out); string(b) != "made\n" {
					return fmt.Errorf("cp out: the host file holds %q", b)
				}
				return nil
			}},
			{"cp of a directory as a tar stream, out and back in", func() error {
				if r := a.run("exec", sb, "--", "sh", "-c", "mkdir -p /tmp/d/sub && echo one > /tmp/d/sub/f && mkdir -p /tmp/back"); r.code != 0 {
					return fmt.Errorf("exec: %v", r)
				}
				r := a.run("cp", sb+":/tmp/d", "-")
				if r.code != 0 {
					return fmt.Errorf("cp out: %v", r)
				}
				got := map[string]string{}
				tr := tar.NewReader(strings.NewReader(r.stdout))
				for {
					h, err := tr.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						return fmt.Errorf("cp out: not a tar stream: %v", err)
					}
					b, _ := io.ReadAll(tr)
					got[h.Name] = string(b)
				}
				if got["d/sub/f"] != "one\n" {
					return fmt.Errorf("cp out: the stream holds %q", got)
				}
				a.stdin = r.stdout
				r = a.run("cp", "-", sb+":/tmp/back")
				a.stdin = ""
				if r.code != 0 {
					return fmt.Errorf("cp in: %v", r)
				}
				return expect("exec", a.run("exec", sb, "--", "cat", "/tmp/back/d/sub/f"), 0, "one\n")
			}},
			{"cp of a missing file fails naming it", func() error {
				r := a.run("cp", sb+":/no/such/file", filepath.Join(a.home, "x"))
				if r.code != 125 || !strings.Contains(r.stderr, "/no/such/file: no such file or directory in the sandbox") {
					return fmt.Errorf("cp out of a missing file: %v", r)
				}
				return nil
			}},
			{"a hostile archive stays in the sandbox", func() error {
				outside, err := os.MkdirTemp("", "akc-outside-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(outside)
				var b bytes.Buffer
				tw := tar.NewWriter(&b)
				for _, h := range []*tar.Header{
					{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "/"},
					{Name: "up" + outside + "/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
					{Name: "../../../.." + outside + "/pwned2", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
				} {
					_ = tw.WriteHeader(h)
					if h.Size > 0 {
						_, _ = tw.Write([]byte("pwned\n"))
					}
				}
				_ = tw.Close()
				a.stdin = b.String()
				a.run("cp", "-", sb+":/tmp")
				a.stdin = ""
				if ents, _ := os.ReadDir(outside); len(ents) != 0 {
					return fmt.Errorf("a hostile archive wrote %v on the host", ents)
				}
				return nil
			}},
		}
		checkContract(t, backend, contract.SuiteFiles, cases)
	})
}

// fileUID is p's owner, or -1.
func fileUID(p string) int {
	fi, err := os.Lstat(p)
	if err != nil {
		return -1
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// TestAPIContractBackends: the HTTP API's run, batch and sandbox
// endpoints through pkg/client and raw requests, with each backend as
// the server's default ([sandbox] backend), with the same assertions.
func TestAPIContractBackends(t *testing.T) {
	contractBackends(t, func(t *testing.T, backend string) {
		a, ref := withBackend(t, backend)
		s := startServe(t, a, "listening on ", "serve", "--port", "0", "--api-key", apiKey)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		const name = "contract-api"
		t.Cleanup(func() { a.run("sandbox", "rm", "--force", name) })
		checkContract(t, backend, contract.SuiteAPI, apiContractCases(ctx, s, s.client(apiKey), ref, backend, name))
	})
}

// apiContractCases are the API suite's cases against the server s (c its
// client) whose default backend is backend: ref is an image it can run,
// name the persistent sandbox the cases create and remove.
func apiContractCases(ctx context.Context, s *apiServer, c *client.Client, ref, backend, name string) []contractCase {
	return []contractCase{
		{"status names the backend", func() error {
			st, err := c.Status(ctx)
			if err != nil || st.Backend != backend {
				return fmt.Errorf("status: %+v %v", st, err)
			}
			return nil
		}},
		{"run", func() error {
			out, err := c.Run(ctx, []string{"sh", "-c", "echo hello; cat /etc/agentkernel-test"}, &client.RunOptions{Image: ref})
			if err != nil || out != "hello\nregistry\n" {
				return fmt.Errorf("run: %q %v", out, err)
			}
			out, err = c.Run(ctx, []string{"printf", "%s|", "a b", "c"}, &client.RunOptions{Image: ref, Profile: "restrictive"})
			if err != nil || out != "a b|c|" {
				return fmt.Errorf("argv: %q %v", out, err)
			}
			return nil
		}},
		{"run: a non-zero exit is a 409 with the output", func() error {
			_, err := c.Run(ctx, []string{"sh", "-c", "echo partial; exit 3"}, &client.RunOptions{Image: ref})
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != 409 || ae.ExitCode == nil || *ae.ExitCode != 3 || ae.Output != "partial\n" {
				return fmt.Errorf("non-zero exit: %#v", err)
			}
			return nil
		}},
		{"batch run", func() error {
			res, err := c.BatchRun(ctx, []client.BatchCommand{
				{Command: []string{"echo", "one"}, RunOptions: client.RunOptions{Image: ref}},
				{Command: []string{"sh", "-c", "exit 5"}, RunOptions: client.RunOptions{Image: ref}},
			})
			if err != nil || len(res) != 2 || res[0].Output == nil || *res[0].Output != "one\n" || res[1].Error == nil || !strings.Contains(*res[1].Error, "code 5") {
				return fmt.Errorf("batch: %+v %v", res, err)
			}
			return nil
		}},
		{"sandbox create, exec and info", func() error {
			r := s.raw("POST", "/sandboxes", `{"name":"`+name+`","image":"`+ref+`","labels":{"team":"ml"}}`)
			if r.status != 201 {
				return fmt.Errorf("create: %d %s", r.status, r.body)
			}
			info, err := c.GetSandbox(ctx, name)
			if err != nil || info.Status != "running" || info.Backend != backend || info.Labels["team"] != "ml" {
				return fmt.Errorf("info: %+v %v", info, err)
			}
			out, err := c.Exec(ctx, name, []string{"sh", "-c", "echo $FOO; pwd"}, &client.ExecOptions{Env: []string{"FOO=bar"}, Workdir: "/tmp"})
			if err != nil || out != "bar\n/tmp\n" {
				return fmt.Errorf("exec: %q %v", out, err)
			}
			r = s.raw("POST", "/sandboxes/"+name+"/exec", `{"command":["sh","-c","echo no; exit 7"]}`)
			if r.status != 409 || string(r.env["exit_code"]) != "7" || r.str("output") != "no\n" {
				return fmt.Errorf("exec exit: %d %s", r.status, r.body)
			}
			return nil
		}},
		{"sandbox files: write, read, list by exec, delete", func() error {
			if err := c.WriteFile(ctx, name, "/tmp/d/a.txt", []byte("héllo")); err != nil {
				return fmt.Errorf("write: %v", err)
			}
			bin := []byte{0, 1, 0xff, 0xfe, 'x'}
			if err := c.WriteFile(ctx, name, "/tmp/bin", bin); err != nil {
				return fmt.Errorf("write binary: %v", err)
			}
			f, err := c.ReadFile(ctx, name, "/tmp/d/a.txt")
			if err != nil || f.Content != "héllo" || f.Size != 6 {
				return fmt.Errorf("read: %+v %v", f, err)
			}
			f, err = c.ReadFile(ctx, name, "/tmp/bin")
			if b, _ := f.Bytes(); err != nil || f.Encoding != "base64" || !bytes.Equal(b, bin) {
				return fmt.Errorf("read binary: %+v %v", f, err)
			}
			if n, err := c.WriteFiles(ctx, name, map[string]string{"/data/m/1": "a", "/data/m/2": "b"}); err != nil || n != 2 {
				return fmt.Errorf("write files: %d %v", n, err)
			}
			if out, err := c.Exec(ctx, name, []string{"cat", "/data/m/1", "/data/m/2", "/tmp/d/a.txt"}, nil); err != nil || out != "abhéllo" {
				return fmt.Errorf("the files in the sandbox: %q %v", out, err)
			}
			if r := s.raw("GET", "/sandboxes/"+name+"/files/tmp/../etc/passwd", ""); r.status != 400 {
				return fmt.Errorf("a path with ..: %d %s", r.status, r.body)
			}
			if r := s.raw("DELETE", "/sandboxes/"+name+"/files//tmp/d/a.txt", ""); r.status != 200 {
				return fmt.Errorf("delete: %d %s", r.status, r.body)
			}
			if _, err := c.ReadFile(ctx, name, "/tmp/d/a.txt"); !errors.Is(err, client.ErrNotFound) {
				return fmt.Errorf("read deleted: %v", err)
			}
			return nil
		}},
		{"sandbox stop and start", func() error {
			if r := s.raw("POST", "/sandboxes/"+name+"/stop", ""); r.status != 200 {
				return fmt.Errorf("stop: %d %s", r.status, r.body)
			}
			if got, _ := c.GetSandbox(ctx, name); got == nil || got.Status != "stopped" {
				return fmt.Errorf("after stop: %+v", got)
			}
			if r := s.raw("POST", "/sandboxes/"+name+"/exec", `{"command":["true"]}`); r.status != 409 {
				return fmt.Errorf("exec in a stopped sandbox: %d %s", r.status, r.body)
			}
			if r := s.raw("POST", "/sandboxes/"+name+"/start", ""); r.status != 200 {
				return fmt.Errorf("start: %d %s", r.status, r.body)
			}
			if out, err := c.Exec(ctx, name, []string{"echo", "up"}, nil); err != nil || out != "up\n" {
				return fmt.Errorf("exec after a restart: %q %v", out, err)
			}
			return nil
		}},
		{"files written outside /workspace survive stop and start", func() error {
			if out, err := c.Exec(ctx, name, []string{"cat", "/data/m/1"}, nil); err != nil || out != "a" {
				return fmt.Errorf("after a restart: %q %v", out, err)
			}
			return nil
		}},
		{"sandbox remove", func() error {
			if r := s.raw("DELETE", "/sandboxes/"+name, ""); r.status != 200 {
				return fmt.Errorf("remove: %d %s", r.status, r.body)
			}
			if _, err := c.GetSandbox(ctx, name); !errors.Is(err, client.ErrNotFound) {
				return fmt.Errorf("after remove: %v", err)
			}
			return nil
		}},
		{"doctor lists the backend's known differences", func() error {
			d, err := c.Doctor(ctx)
			if err != nil {
				return err
			}
			for _, bc := range d.Contract {
				if bc.Backend != backend {
					continue
				}
				if len(bc.Differences) != len(contract.For(backend)) {
					return fmt.Errorf("GET /doctor lists %d differences for %s, internal/contract %d", len(bc.Differences), backend, len(contract.For(backend)))
				}
				return nil
			}
			return fmt.Errorf("GET /doctor has no contract for %s: %+v", backend, d.Contract)
		}},
	}
}
