//go:build linux

package e2e

// README.md's commands are run as written, so that the README cannot
// drift from what the binary does.

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// readmeSkip lists the README commands not run, each with the reason;
// a README command missing here is run. Keys are prefixes of the
// command as written.
var readmeSkip = map[string]string{
	"agentkernel run --network filtered --allow-domain '*.pypi.org'": "installs from PyPI: needs the network",
	"agentkernel images pull python:3.12-alpine":                     "pulls from Docker Hub: needs the network",
	"agentkernel run -S GITHUB_TOKEN:api.github.com":                 "calls api.github.com: needs the network",
}

// readmeWant is what a README command must do when it is not simply
// "exit 0": its exit status, text its stdout (or, errOut, stderr) must
// hold, its stdin; a server is started, must stay up, and is stopped.
type readmeWant struct {
	code   int
	out    string
	outRE  string // a regular expression stdout must match
	errOut string
	stdin  string
	server string            // a file the server makes when it is ready ($HOME, $XDG_RUNTIME_DIR expanded)
	tty    string            // typed into a terminal, for interactive commands
	files  map[string]string // the project files it needs, there only while it runs
}

// readmeWants: keys are prefixes of the command as written.
var readmeWants = map[string]readmeWant{
	"agentkernel run -- sh -c 'id; hostname; ls /'":       {out: "uid=0(root)"},
	"agentkernel run -p restrictive -- touch /x":          {code: 1, errOut: "Read-only file system"},
	"agentkernel run python3 -c 'print(1)'":               {out: "1\n"},
	"agentkernel run --memory 64m --timeout 10s -- ./job": {out: "job done", files: map[string]string{"job": "#!/bin/sh\necho job done\n"}},
	"agentkernel run -t -- sh":                            {tty: "echo TTY-$((20+1)); exit 0\r", out: "TTY-21"},
	"agentkernel run --dry-run -- make test":              {out: `"image": "gcc:`},
	"agentkernel run --cache go -- go test ./...": {out: "ok  \texample.com/readme", files: map[string]string{
		"go.mod":      "module example.com/readme\n\ngo 1.21\n",
		"readme.go":   "package readme\n\nfunc One() int { return 1 }\n",
		"one_test.go": "package readme\n\nimport \"testing\"\n\nfunc TestOne(t *testing.T) {\n\tif One() != 1 {\n\t\tt.Fatal(\"one\")\n\t}\n}\n",
	}},
	"agentkernel detect -- cargo test":                  {out: `command "cargo"`},
	"agentkernel images list":                           {out: "python"},
	"agentkernel init && agentkernel config show":       {out: "profile"},
	"agentkernel profiles":                              {out: "restrictive"},
	"agentkernel secret set GITHUB_TOKEN":               {stdin: "ghp_readme_token\n"},
	"agentkernel exec dev -- python3 -c 'print(2+2)'":   {out: "4\n"},
	"agentkernel exec -d dev -- python3 -m http.server": {outRE: `^[0-9a-f]{16}\n$`},
	"agentkernel cp dev:/root - | tar -tvf -":           {out: "root/data.csv"},
	"agentkernel sandbox list":                          {outRE: `^NAME +STATUS +IMAGE +BACKEND +AGE +EXPIRES +NETWORK +PORTS +LABELS\ndev +running +python:3\.12-alpine +native `},
	"agentkernel session start --name fix":              {out: "session-fix"},
	"agentkernel run --keep -- make build":              {out: "built", files: map[string]string{"Makefile": "build:\n\t@echo built\n"}},
	"agentkernel ps && agentkernel logs web":            {out: "echo hi > /tmp/x"},
	"agentkernel run --mode claude -- echo fast":        {out: "fast\n"},
	"agentkernel daemon status":                         {out: "1 from a warm sandbox"},
	"agentkernel plugin install claude":                 {out: "SKILL.md"},
	"agentkernel mcp-server":                            {errOut: "MCP server"},
	"agentkernel serve --unix":                          {server: "$XDG_RUNTIME_DIR/agentkernel.sock"},
	"agentkernel serve":                                 {server: "$HOME/.local/share/agentkernel/api-key"},
	"agentkernel agents":                                {out: "Claude Code"},
}

// readmeCommands returns the command lines of README.md's sh blocks
// that start with "agentkernel " (continuation lines joined).
func readmeCommands(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	in := false
	var cont string
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		}
		if !in {
			continue
		}
		line = cont + line
		cont = ""
		if strings.HasSuffix(line, "\\") {
			cont = strings.TrimSuffix(line, "\\")
			continue
		}
		// The build line ends in its first run: "... && bin/agentkernel run ...".
		if i := strings.Index(line, "&& bin/agentkernel "); i >= 0 {
			line = line[i+len("&& bin/"):]
		}
		if strings.HasPrefix(line, "agentkernel ") {
			cmds = append(cmds, line)
		}
	}
	if len(cmds) < 30 {
		t.Fatalf("found only %d agentkernel commands in README.md's sh blocks", len(cmds))
	}
	return cmds
}

// lookup returns the entry of m whose key is the longest prefix of cmd.
func lookup[V any](m map[string]V, cmd string) (V, bool) {
	var best string
	var v V
	found := false
	for k, x := range m {
		if strings.HasPrefix(cmd, k) && len(k) >= len(best) {
			best, v, found = k, x, true
		}
	}
	return v, found
}

// TestREADMECommands runs every command of README.md's sh blocks that
// does not need the network, in order, as a shell runs them (bash,
// pipefail), with agentkernel on PATH and a fresh HOME (so a fresh
// default data dir). Set-up a reader would have: the images the tour
// names (a busybox test image as alpine:3.20, the host's python3 as
// python:3.12-alpine), the project files the commands name.
func TestREADMECommands(t *testing.T) {
	cmds := readmeCommands(t)
	a := newAK(t)
	a.dataDir = filepath.Join(a.home, ".local", "share", "agentkernel")
	runtimeDir := t.TempDir()
	loadAs(t, a, "alpine:3.20", "readme-alpine")
	importHostPython(t, a, "python:3.12-alpine")
	writeFiles(t, a.dir, map[string]string{"data.csv": "a,b\n1,2\n"})
	warmGoCacheMu.Lock()
	if warmGoCache != "" {
		os.MkdirAll(filepath.Join(a.dataDir, "caches"), 0o755)
		if out, err := exec.Command("cp", "-a", warmGoCache, filepath.Join(a.dataDir, "caches", "go")).CombinedOutput(); err != nil {
			t.Logf("seeding the Go cache: %v %s", err, out)
		}
	}
	warmGoCacheMu.Unlock()
	t.Cleanup(func() {
		a.run("daemon", "stop")
		for _, line := range strings.Split(a.run("sandbox", "list", "--all").stdout, "\n")[1:] {
			if f := strings.Fields(line); len(f) > 0 {
				a.run("sandbox", "rm", "--force", f[0])
			}
		}
	})
	env := []string{
		"HOME=" + a.home,
		"PATH=" + filepath.Dir(binary) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/local/go/bin",
		"XDG_CONFIG_HOME=" + filepath.Join(a.home, ".config"),
		"XDG_RUNTIME_DIR=" + runtimeDir,
	}

	ran := 0
	for _, cmd := range cmds {
		if why, ok := lookup(readmeSkip, cmd); ok {
			t.Logf("not run: %s (%s)", cmd, why)
			continue
		}
		ran++
		want, _ := lookup(readmeWants, cmd)
		writeFiles(t, a.dir, want.files)
		for n := range want.files {
			os.Chmod(filepath.Join(a.dir, n), 0o755)
		}
		start := time.Now()
		var r result
		switch {
		case want.server != "":
			ready := os.Expand(want.server, func(k string) string {
				return map[string]string{"HOME": a.home, "XDG_RUNTIME_DIR": runtimeDir}[k]
			})
			r = readmeServer(t, a, env, cmd, ready)
			if strings.Contains(r.stderr, "address already in use") {
				t.Logf("not checked: %s: its port is taken by another program on this machine", cmd)
				continue
			}
		case want.tty != "":
			r = readmeTTY(t, a, env, cmd, want.tty)
		default:
			r = readmeShell(t, a, env, cmd, want.stdin)
		}
		r.took = time.Since(start)
		for n := range want.files {
			os.Remove(filepath.Join(a.dir, n))
		}
		if r.code != want.code || !strings.Contains(r.stdout, want.out) || !strings.Contains(r.stderr, want.errOut) ||
			!regexp.MustCompile(want.outRE).MatchString(r.stdout) {
			t.Errorf("README command %s\nwant exit %d, stdout with %q (matching %q), stderr with %q; got %v", cmd, want.code, want.out, want.outRE, want.errOut, r)
		}
	}
	t.Logf("ran %d of README.md's %d agentkernel commands", ran, len(cmds))
	for k := range readmeWants {
		if !anyHasPrefix(cmds, k) {
			t.Errorf("readmeWants names %q, which README.md no longer has", k)
		}
	}
	for k := range readmeSkip {
		if !anyHasPrefix(cmds, k) {
			t.Errorf("readmeSkip names %q, which README.md no longer has", k)
		}
	}
}

func anyHasPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// readmeShell runs one README line with bash, as typed.
func readmeShell(t *testing.T, a *ak, env []string, line, stdin string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	c.Dir, c.Env = a.dir, env
	c.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if strings.Contains(r.stderr, "goroutine ") || strings.Contains(r.stderr, "panic:") {
		t.Errorf("%s printed a Go stack trace:\n%s", line, r.stderr)
	}
	return r
}

// readmeServer starts a README line that serves until stopped, waits for
// ready to appear, checks it is still up a moment later, and stops it
// with SIGTERM, which must end it cleanly.
func readmeServer(t *testing.T, a *ak, env []string, line, ready string) result {
	t.Helper()
	c := exec.Command("bash", "-c", "exec "+line)
	c.Dir, c.Env = a.dir, env
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	r := result{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case err := <-done:
			r.stdout, r.stderr, r.code = out.String(), errb.String(), exitOf(err)
			if r.code == 0 {
				r.code = -1 // a server that ends by itself is a failure
			}
			return r
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Process.Kill()
			<-done
			return result{code: -2, stdout: out.String(), stderr: errb.String() + "\n(never made " + ready + ")"}
		}
	}
	select {
	case err := <-done:
		return result{code: exitOf(err) - 1000, stdout: out.String(), stderr: errb.String()}
	case <-time.After(300 * time.Millisecond):
	}
	c.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		r.code = exitOf(err)
	case <-time.After(10 * time.Second):
		c.Process.Kill()
		<-done
		r.code = -3
	}
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

// readmeTTY runs an interactive README line on a terminal, types keys,
// and returns what the terminal showed once the line has ended.
func readmeTTY(t *testing.T, a *ak, env []string, line, keys string) result {
	t.Helper()
	c := exec.Command("bash", "-c", line)
	c.Dir, c.Env = a.dir, env
	master, err := pty.StartWithSize(c, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	var sb bytes.Buffer
	copied := make(chan struct{})
	go func() {
		io.Copy(&sb, master)
		close(copied)
	}()
	master.Write([]byte(keys))
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var r result
	select {
	case err := <-done:
		r.code = exitOf(err)
	case <-time.After(30 * time.Second):
		c.Process.Kill()
		<-done
		r.code = -3
	}
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	master.Close()
	r.stdout = strings.ReplaceAll(sb.String(), "\r\n", "\n")
	return r
}

func exitOf(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -4
}

// TestREADMESubcommands: every 'agentkernel SUBCOMMAND' README.md names,
// in code or prose, exists: its --help exits 0, and a second word that
// is not an argument names one of its subcommands.
func TestREADMESubcommands(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// Code: the lines of fenced blocks and the inline code spans.
	var code []string
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if in {
			code = append(code, line)
		}
	}
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(string(b), -1) {
		code = append(code, m[1])
	}
	a := newAK(t)
	re := regexp.MustCompile(`(?:^|[\s;&|(])agentkernel ([a-z][a-z-]*)(?: ([a-z][a-z|-]*))?`)
	checked := map[string]bool{}
	helps := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(strings.Join(code, "\n"), -1) {
		sub, second := m[1], m[2]
		if !checked[sub] {
			checked[sub] = true
			r := a.run(sub, "--help")
			if r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
				t.Errorf("README names 'agentkernel %s': --help says %v", sub, r)
				continue
			}
			helps[sub] = r.stdout
		}
		help := helps[sub]
		if second == "" || !strings.Contains(help, "Available Commands:") {
			continue // a command with arguments, not subcommands
		}
		for _, s := range strings.Split(second, "|") {
			if checked[sub+" "+s] {
				continue
			}
			checked[sub+" "+s] = true
			r := a.run(sub, s, "--help")
			if r.code != 0 || r.stdout == help || !strings.Contains(r.stdout, "Usage:\n  agentkernel "+sub+" ") {
				t.Errorf("README names 'agentkernel %s %s': %v", sub, s, r)
			}
		}
	}
	if len(checked) < 25 {
		t.Errorf("only %d commands found in README.md: %v", len(checked), checked)
	}
}

// importHostPython makes an image named ref of the host's python3 (the
// interpreter, the libraries it and its extension modules load, and its
// standard library) with 'images import', as a reader without network
// would make one from a root filesystem tarball.
func importHostPython(t *testing.T, a *ak, ref string) {
	t.Helper()
	py, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		t.Skipf("no python3 on this host: %v", err)
	}
	stdlib := filepath.Join("/usr/lib", filepath.Base(py))
	paths := []string{"/usr/bin/python3", py, stdlib}
	bins := []string{py}
	mods, _ := filepath.Glob(filepath.Join(stdlib, "lib-dynload", "*.so"))
	bins = append(bins, mods...)
	out, err := exec.Command("ldd", bins...).Output()
	if err != nil && len(out) == 0 {
		t.Fatalf("ldd: %v", err)
	}
	for _, m := range regexp.MustCompile(`(?m)(/\S+) \(0x`).FindAllStringSubmatch(string(out), -1) {
		paths = append(paths, m[1])
	}
	tarPath := filepath.Join(t.TempDir(), "python-rootfs.tar")
	f, err := os.Create(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	w := &rootfsTar{tw: tar.NewWriter(f), seen: map[string]bool{}}
	for _, d := range []string{"/root", "/tmp", "/etc"} {
		w.dir(d, 0o755)
	}
	for _, p := range paths {
		if err := w.add(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if r := a.run("images", "import", tarPath, ref); r.code != 0 {
		t.Fatalf("images import %s: %v", ref, r)
	}
}

// rootfsTar writes host paths into a root filesystem tarball: symbolic
// links as links (and what they point to), directories whole, each
// parent directory once.
type rootfsTar struct {
	tw   *tar.Writer
	seen map[string]bool
}

func (w *rootfsTar) dir(p string, mode int64) {
	if p == "/" || w.seen[p] {
		return
	}
	w.dir(filepath.Dir(p), 0o755)
	w.seen[p] = true
	w.tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/") + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: time.Unix(0, 0)})
}

func (w *rootfsTar) add(p string) error {
	p = filepath.Clean(p)
	if w.seen[p] {
		return nil
	}
	// Parents that are links (/lib -> usr/lib) are kept as links.
	parent := filepath.Dir(p)
	if real, err := filepath.EvalSymlinks(parent); err == nil && real != parent {
		for d := parent; d != "/"; d = filepath.Dir(d) {
			if fi, err := os.Lstat(d); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				if err := w.add(d); err != nil {
					return err
				}
			}
		}
		return w.add(filepath.Join(real, filepath.Base(p)))
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		w.dir(parent, 0o755)
		w.seen[p] = true
		w.tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: tar.TypeSymlink, Linkname: target, ModTime: time.Unix(0, 0)})
		if !filepath.IsAbs(target) {
			target = filepath.Join(parent, target)
		}
		return w.add(target)
	case fi.IsDir():
		w.dir(p, int64(fi.Mode().Perm()))
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if n := e.Name(); n == "__pycache__" || n == "test" || n == "site-packages" || n == "dist-packages" {
				continue
			}
			if err := w.add(filepath.Join(p, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		w.dir(parent, 0o755)
		w.seen[p] = true
		if err := w.tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(p, "/"), Typeflag: tar.TypeReg, Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w.tw, f)
		return err
	}
	return nil
}
