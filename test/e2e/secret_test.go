//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// TestSecretCLI drives 'agentkernel secret' through the agentkernel
// binary (which hands it to agentkernel-full): values from stdin and the
// command line, exact bytes out of get, list's format, exit 1 for a
// missing secret, the value absent from the files on disk, and clear
// errors (exit 125, no stack trace, nothing rewritten) for a bad name and
// a wrong key.
func TestSecretCLI(t *testing.T) {
	a := newAK(t)
	must := func(r result, code int, what string) result {
		t.Helper()
		if r.code != code {
			t.Fatalf("%s: want exit %d: %v", what, code, r)
		}
		return r
	}
	const token = "ghp_e2eSecretValue0123456789"
	a.stdin = token + "\n"
	r := must(a.run("secret", "set", "GITHUB_TOKEN"), 0, "set from stdin")
	if strings.Contains(r.stderr, "visible") || strings.Contains(r.stdout+r.stderr, token) {
		t.Errorf("set from stdin: %v", r)
	}
	a.stdin = ""
	if r = must(a.run("secret", "get", "GITHUB_TOKEN"), 0, "get"); r.stdout != token {
		t.Errorf("get = %q, want the value without a newline (stdout is a pipe)", r.stdout)
	}
	// Only one trailing newline is dropped; other bytes stay.
	a.stdin = "line 1\nline 2\n\n"
	must(a.run("secret", "set", "MULTI"), 0, "set multi-line")
	if r = must(a.run("secret", "get", "MULTI"), 0, "get multi-line"); r.stdout != "line 1\nline 2\n" {
		t.Errorf("multi-line value = %q", r.stdout)
	}
	bin := []byte{0, 1, 2, 0xff, 0xfe, '\r', '\n', 'x'}
	a.stdin = string(bin)
	must(a.run("secret", "set", "bin-ary"), 0, "set binary")
	a.stdin = ""
	if r = must(a.run("secret", "get", "bin-ary"), 0, "get binary"); r.stdout != string(bin) {
		t.Errorf("binary value = %q, want %q", r.stdout, bin)
	}
	// On the command line: works, with a warning.
	r = must(a.run("secret", "set", "CLI_KEY", "from-argv"), 0, "set from argv")
	if !strings.Contains(r.stderr, "visible in shell history and process lists") {
		t.Errorf("no warning for a value on the command line: %v", r)
	}
	if r = must(a.run("secret", "list"), 0, "list"); r.stdout != "Keys:\n  CLI_KEY\n  GITHUB_TOKEN\n  MULTI\n  bin-ary\n" {
		t.Errorf("list = %q", r.stdout)
	}

	// On disk: 0600 files in a 0700 directory, and no value in them.
	dir := filepath.Join(a.dataDir, "secrets")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("secrets directory: %v, %v", fi, err)
	}
	files := map[string][]byte{}
	for _, f := range []string{"vault.age", "key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, %v", f, fi, err)
		}
		files[f], _ = os.ReadFile(filepath.Join(dir, f))
		for _, v := range []string{token, "from-argv", "line 1", "GITHUB_TOKEN"} {
			if bytes.Contains(files[f], []byte(v)) {
				t.Errorf("%s holds %q in clear", f, v)
			}
		}
	}
	if !bytes.HasPrefix(files["vault.age"], []byte("age-encryption.org/v1\n")) {
		t.Errorf("the vault is not an age file: %.40q", files["vault.age"])
	}

	// A missing secret: exit 1, in the spec's words.
	r = must(a.run("secret", "delete", "NOPE"), 1, "delete missing")
	if !strings.Contains(r.stderr, "Secret 'NOPE' not found") {
		t.Errorf("delete missing: %v", r)
	}
	must(a.run("secret", "get", "NOPE"), 1, "get missing")
	must(a.run("secret", "delete", "CLI_KEY"), 0, "delete")
	must(a.run("secret", "get", "CLI_KEY"), 1, "get deleted")

	// Bad names and usage: 125 with a clear message.
	for _, args := range [][]string{{"set", "a b", "v"}, {"get", "../key"}, {"delete", "K=V"}} {
		r = must(a.run(append([]string{"secret"}, args...)...), 125, fmt.Sprint(args))
		if !strings.Contains(r.stderr, "invalid secret name") {
			t.Errorf("%v: %v", args, r)
		}
	}
	must(a.run("secret", "get"), 125, "get without KEY")
	a.stdin = ""
	if r = must(a.run("secret", "set", "EMPTY"), 125, "empty stdin"); !strings.Contains(r.stderr, "no value") {
		t.Errorf("empty stdin: %v", r)
	}
	a.stdin = strings.Repeat("x", 64<<10+1)
	if r = must(a.run("secret", "set", "BIG"), 125, "oversized"); !strings.Contains(r.stderr, "64 KiB") {
		t.Errorf("oversized: %v", r)
	}
	a.stdin = ""

	// The wrong key, from the variable: refused, nothing rewritten.
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	a.env = []string{"AGENTKERNEL_SECRETS_KEY=" + other.String()}
	for _, args := range [][]string{{"get", "GITHUB_TOKEN"}, {"list"}, {"set", "X", "y"}, {"delete", "MULTI"}} {
		r = must(a.run(append([]string{"secret"}, args...)...), 125, "wrong key "+fmt.Sprint(args))
		if !strings.Contains(r.stderr, "the vault cannot be decrypted with this key") || strings.Contains(r.stderr, other.String()) {
			t.Errorf("wrong key %v: %v", args, r)
		}
	}
	a.env = nil
	if after, _ := os.ReadFile(filepath.Join(dir, "key")); !bytes.Equal(after, files["key"]) {
		t.Error("the key file changed")
	}
	vaultBefore, _ := os.ReadFile(filepath.Join(dir, "vault.age"))
	a.env = []string{"AGENTKERNEL_SECRETS_KEY=" + other.String()}
	must(a.run("secret", "set", "X", "y"), 125, "wrong key set")
	a.env = nil
	if after, _ := os.ReadFile(filepath.Join(dir, "vault.age")); !bytes.Equal(after, vaultBefore) {
		t.Error("a set with the wrong key rewrote the vault")
	}

	// A key file others can read is refused with the fix.
	if err := os.Chmod(filepath.Join(dir, "key"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r = must(a.run("secret", "get", "GITHUB_TOKEN"), 125, "key 0644"); !strings.Contains(r.stderr, "chmod 600 "+filepath.Join(dir, "key")) {
		t.Errorf("key 0644: %v", r)
	}
	os.Chmod(filepath.Join(dir, "key"), 0o600)
	// A damaged vault.
	if err := os.WriteFile(filepath.Join(dir, "vault.age"), vaultBefore[:len(vaultBefore)-7], 0o600); err != nil {
		t.Fatal(err)
	}
	if r = must(a.run("secret", "list"), 125, "damaged"); !strings.Contains(r.stderr, "is damaged") {
		t.Errorf("damaged vault: %v", r)
	}

	// --help says where the vault lives and how it is encrypted.
	for _, sub := range []string{"set", "get", "list", "delete"} {
		r = must(a.run("secret", sub, "--help"), 0, sub+" --help")
		if !strings.Contains(r.stdout, "secrets/vault.age") || !strings.Contains(r.stdout, "age (X25519)") || !strings.Contains(r.stdout, "AGENTKERNEL_SECRETS_KEY") {
			t.Errorf("%s --help: %s", sub, r.stdout)
		}
	}
}

// TestSecretBackends: [secrets] backend = "env" reads the host's
// variables and refuses to store; "keyring" is a clear error.
func TestSecretBackends(t *testing.T) {
	a := newAK(t)
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[secrets]\nbackend = \"env\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.env = []string{"MY_API_KEY=from-the-env"}
	if r := a.run("secret", "get", "MY_API_KEY"); r.code != 0 || r.stdout != "from-the-env" {
		t.Errorf("env get: %v", r)
	}
	if r := a.run("secret", "get", "NOT_SET"); r.code != 1 || !strings.Contains(r.stderr, "Secret 'NOT_SET' not found") {
		t.Errorf("env get missing: %v", r)
	}
	a.stdin = "never read\n"
	for _, args := range [][]string{{"set", "K"}, {"set", "K", "v"}} {
		r := a.run(append([]string{"secret"}, args...)...)
		if r.code != 125 || !strings.Contains(r.stderr, "Cannot set secrets with 'env' backend") {
			t.Errorf("env %v: %v", args, r)
		}
	}
	if r := a.run("secret", "delete", "MY_API_KEY"); r.code != 125 || !strings.Contains(r.stderr, "Cannot delete secrets with 'env' backend") {
		t.Errorf("env delete: %v", r)
	}
	if r := a.run("secret", "list"); r.code != 0 || r.stdout != "Keys:\n" {
		t.Errorf("env list: %v", r)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "secrets")); !os.IsNotExist(err) {
		t.Errorf("the env backend wrote files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[secrets]\nbackend = \"keyring\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := a.run("secret", "list"); r.code != 125 || !strings.Contains(r.stderr, "'keyring' secrets backend is not supported") {
		t.Errorf("keyring: %v", r)
	}
}

// TestSecretConcurrentSets: agentkernel processes setting secrets at once
// (the first making the key) lose none.
func TestSecretConcurrentSets(t *testing.T) {
	a := newAK(t)
	const n = 8
	var wg sync.WaitGroup
	results := make([]result, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := a.cmd(ctx, "secret", "set", fmt.Sprintf("K%d", i))
			c.Stdin = strings.NewReader(fmt.Sprintf("value %d", i))
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			err := c.Run()
			results[i] = result{stdout: out.String()}
			if err != nil {
				results[i].code = -1
				results[i].stderr = err.Error()
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("set K%d: %v", i, r)
		}
	}
	r := a.run("secret", "list")
	if got := strings.Count(r.stdout, "\n  K"); r.code != 0 || got != n {
		t.Fatalf("%d of %d secrets after concurrent sets: %v", got, n, r)
	}
	if r = a.run("secret", "get", "K5"); r.stdout != "value 5" {
		t.Errorf("K5 = %v", r)
	}
}

// TestSecretTerminal: on a terminal, set prompts and the typed value is
// not echoed; get ends the value with a newline there.
func TestSecretTerminal(t *testing.T) {
	a := newAK(t)
	const value = "typed-secret-value-42"
	c := a.cmd(context.Background(), "secret", "set", "TYPED")
	master, err := pty.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	out := make(chan string, 1)
	var buf bytes.Buffer
	var mu sync.Mutex
	go func() {
		b := make([]byte, 256)
		for {
			n, err := master.Read(b)
			mu.Lock()
			buf.Write(b[:n])
			mu.Unlock()
			if err != nil {
				mu.Lock()
				out <- buf.String()
				mu.Unlock()
				return
			}
		}
	}()
	// Type only once the prompt is up and echo is off on the terminal.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		prompted := strings.Contains(buf.String(), "(input hidden): ")
		mu.Unlock()
		tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if prompted && tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("no prompt with echo off; output so far %q", buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	io.WriteString(master, value+"\r")
	if err := c.Wait(); err != nil {
		t.Fatalf("set on a terminal: %v", err)
	}
	master.Close()
	select {
	case s := <-out:
		if strings.Contains(s, value) {
			t.Errorf("the typed value was echoed: %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal did not close")
	}
	if r := a.run("secret", "get", "TYPED"); r.code != 0 || r.stdout != value {
		t.Fatalf("typed value stored as %v", r)
	}

	// get on a terminal: the value and a newline.
	c = a.cmd(context.Background(), "secret", "get", "TYPED")
	master, err = pty.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&got, master); close(done) }()
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		master.Close()
		<-done
	}
	if got.String() != value+"\r\n" {
		t.Errorf("get on a terminal printed %q, want the value and a newline", got.String())
	}
}
