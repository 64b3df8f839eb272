//go:build unix

package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
)

// helperEnv makes the test binary a helper process that sets secrets
// (TestConcurrentSetsProcesses).
const helperEnv = "AK_SECRETS_TEST_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperMain(spec))
	}
	os.Exit(m.Run())
}

// helperMain: spec is "DATADIR PREFIX N": set PREFIX-0 … PREFIX-(N-1).
func helperMain(spec string) int {
	f := strings.Fields(spec)
	n, _ := strconv.Atoi(f[2])
	v, err := Open(Options{DataDir: f[0], LookupEnv: noEnv})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i := range n {
		k := fmt.Sprintf("%s-%d", f[1], i)
		if err := v.Set(k, []byte("value of "+k)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// noEnv is an environment without AGENTKERNEL_SECRETS_KEY, whatever the
// test's own holds.
func noEnv(string) (string, bool) { return "", false }

// envWith is an environment holding only these variables.
func envWith(kv ...string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1], true
			}
		}
		return "", false
	}
}

func openFile(t *testing.T, dataDir string, env func(string) (string, bool)) Vault {
	t.Helper()
	v, err := Open(Options{DataDir: dataDir, LookupEnv: env})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustSet(t *testing.T, v Vault, k string, val []byte) {
	t.Helper()
	if err := v.Set(k, val); err != nil {
		t.Fatalf("Set(%q): %v", k, err)
	}
}

// wantKind fails unless err is of kind and its message holds each of
// the substrings.
func wantKind(t *testing.T, what string, err, kind error, subs ...string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%s: error %v, want kind %v", what, err, kind)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %T is not a *secrets.Error", what, err)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: error %q does not say %q", what, err, s)
		}
	}
}

// snapshot is every file of the secrets directory: name → content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

func sameFiles(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if len(before) != len(after) {
		t.Errorf("%s: files %d → %d", what, len(before), len(after))
	}
	for k, b := range before {
		if after[k] != b {
			t.Errorf("%s: %s was rewritten", what, k)
		}
	}
}

// TestRoundTrip: values of every kind (newlines, every byte value, the
// largest allowed) come back exactly; list is sorted names; delete
// removes; a replaced value is replaced; the plaintext is the documented
// JSON with set_at and backend.
func TestRoundTrip(t *testing.T) {
	data := t.TempDir()
	now := time.Date(2026, 11, 26, 1, 2, 3, 0, time.FixedZone("X", 3600))
	v, err := Open(Options{DataDir: data, LookupEnv: noEnv, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if v.Backend() != BackendFile || v.Location() != filepath.Join(data, "secrets", "vault.age") {
		t.Errorf("backend %q location %q", v.Backend(), v.Location())
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := bytes.Repeat([]byte{0xff, '\n', 0}, MaxValueSize/3)
	big = append(big, 'x')
	values := map[string][]byte{
		"GITHUB_TOKEN": []byte("ghp_abc123"),
		"multi-line":   []byte("line one\nline two\n\n"),
		"binary":       all,
		"z_big":        big,
		"A":            {0},
	}
	for k, val := range values {
		mustSet(t, v, k, val)
	}
	for k, val := range values {
		got, err := v.Get(k)
		if err != nil || !bytes.Equal(got, val) {
			t.Errorf("Get(%q) = %d bytes, %v; want %d bytes", k, len(got), err, len(val))
		}
		got[0] ^= 1 // a copy: the vault's value stays
	}
	if got, _ := v.Get("A"); !bytes.Equal(got, []byte{0}) {
		t.Errorf("changing a returned value changed the vault's: %v", got)
	}
	names, err := v.List()
	if want := []string{"A", "GITHUB_TOKEN", "binary", "multi-line", "z_big"}; err != nil || !slices.Equal(names, want) {
		t.Errorf("List = %v, %v; want %v", names, err, want)
	}
	mustSet(t, v, "GITHUB_TOKEN", []byte("replaced"))
	if got, _ := v.Get("GITHUB_TOKEN"); string(got) != "replaced" {
		t.Errorf("replaced value reads %q", got)
	}
	if err := v.Delete("binary"); err != nil {
		t.Fatal(err)
	}
	_, err = v.Get("binary")
	wantKind(t, "Get after Delete", err, ErrNotFound, "Secret 'binary' not found")
	wantKind(t, "Delete twice", v.Delete("binary"), ErrNotFound, "Secret 'binary' not found")

	// A fresh Vault over the same files reads the same; the plaintext
	// is the documented document.
	v2 := openFile(t, data, noEnv)
	if got, err := v2.Get("multi-line"); err != nil || string(got) != "line one\nline two\n\n" {
		t.Errorf("second vault: %q, %v", got, err)
	}
	doc := decryptWithKeyFile(t, data)
	var d struct {
		Version  int                          `json:"version"`
		Secrets  map[string]string            `json:"secrets"`
		Metadata map[string]map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatalf("plaintext is not JSON: %v", err)
	}
	if d.Version != 1 || d.Secrets["GITHUB_TOKEN"] != base64.StdEncoding.EncodeToString([]byte("replaced")) {
		t.Errorf("document: %s", doc)
	}
	if md := d.Metadata["A"]; md["set_at"] != "2026-11-26T00:02:03Z" || md["backend"] != "file" {
		t.Errorf("metadata of A: %v", md)
	}
	if _, ok := d.Metadata["binary"]; ok {
		t.Errorf("deleted secret's metadata kept: %s", doc)
	}
}

// decryptWithKeyFile decrypts the vault with the key file, as the age
// command would.
func decryptWithKeyFile(t *testing.T, data string) []byte {
	t.Helper()
	kf, err := os.Open(filepath.Join(data, "secrets", "key"))
	if err != nil {
		t.Fatal(err)
	}
	defer kf.Close()
	ids, err := age.ParseIdentities(kf)
	if err != nil {
		t.Fatalf("key file is not an age identity file: %v", err)
	}
	ct, err := os.ReadFile(filepath.Join(data, "secrets", "vault.age"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := age.Decrypt(bytes.NewReader(ct), ids...)
	if err != nil {
		t.Fatal(err)
	}
	pt, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return pt
}

// TestValueNeverOnDisk: neither a value (in clear, base64 or hex) nor a
// name appears in any file the vault writes.
func TestValueNeverOnDisk(t *testing.T) {
	data := t.TempDir()
	v := openFile(t, data, noEnv)
	value := []byte("sk-live-5f3c9e0a7b2d4c1e8f6a0b9c3d7e2f1a")
	name := "MY_UNIQUE_SECRET_NAME"
	mustSet(t, v, name, value)
	mustSet(t, v, "OTHER", []byte("x"))
	forms := [][]byte{value, []byte(base64.StdEncoding.EncodeToString(value)), []byte(fmt.Sprintf("%x", value)), []byte(name)}
	for f, content := range snapshot(t, filepath.Join(data, "secrets")) {
		for _, form := range forms {
			if bytes.Contains([]byte(content), form) {
				t.Errorf("%s contains %q", f, form)
			}
		}
	}
	// The control: the same search finds it in the plaintext.
	if pt := decryptWithKeyFile(t, data); !bytes.Contains(pt, []byte(base64.StdEncoding.EncodeToString(value))) || !bytes.Contains(pt, []byte(name)) {
		t.Fatalf("control: the plaintext does not hold the value: %s", pt)
	}
}

// TestFileModes: even under umask 0 the directory is 0700 and every file
// 0600; nothing is written by a read, or by a delete in an empty place.
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	data := filepath.Join(t.TempDir(), "data")
	v := openFile(t, data, noEnv)
	if _, err := v.Get("X"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on nothing: %v", err)
	}
	if names, err := v.List(); err != nil || len(names) != 0 {
		t.Fatalf("List on nothing: %v, %v", names, err)
	}
	wantKind(t, "Delete on nothing", v.Delete("X"), ErrNotFound)
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reads made the data directory: %v", err)
	}
	// A secrets directory without a vault or key (a first set that
	// failed) is an empty vault too.
	if err := os.MkdirAll(filepath.Join(data, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	wantKind(t, "Delete in an empty directory", v.Delete("X"), ErrNotFound, "Secret 'X' not found")
	mustSet(t, v, "X", []byte("1"))
	check := func(p string, want os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	dir := filepath.Join(data, "secrets")
	check(data, 0o700)
	check(dir, 0o700)
	for _, f := range []string{"key", "vault.age", "lock"} {
		check(filepath.Join(dir, f), 0o600)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		t.Errorf("secrets directory holds %d files, want key, vault.age and lock", len(ents))
	}
}

// TestInsecureFilesRefused: a key file, vault or directory that group or
// others can read, that is a symbolic link, or that another user owns is
// refused with the command that fixes it, and nothing is rewritten.
func TestInsecureFilesRefused(t *testing.T) {
	type setup struct {
		name   string
		break_ func(dir string) error
		subs   []string
	}
	cases := []setup{
		{"key 0644", func(d string) error { return os.Chmod(filepath.Join(d, "key"), 0o644) }, []string{"key file", "mode 0644", "chmod 600 " + "DIR/key"}},
		{"key 0620", func(d string) error { return os.Chmod(filepath.Join(d, "key"), 0o620) }, []string{"chmod 600"}},
		{"vault 0604", func(d string) error { return os.Chmod(filepath.Join(d, "vault.age"), 0o604) }, []string{"vault", "chmod 600 DIR/vault.age"}},
		{"dir 0755", func(d string) error { return os.Chmod(d, 0o755) }, []string{"secrets directory", "chmod 700 DIR"}},
		{"key symlink", func(d string) error {
			k := filepath.Join(d, "key")
			if err := os.Rename(k, k+".real"); err != nil {
				return err
			}
			return os.Symlink(k+".real", k)
		}, []string{"symbolic link"}},
		{"vault fifo", func(d string) error {
			p := filepath.Join(d, "vault.age")
			os.Remove(p)
			return syscall.Mkfifo(p, 0o600)
		}, []string{"not a regular file"}},
	}
	if os.Geteuid() == 0 {
		cases = append(cases,
			setup{"key of another user", func(d string) error { return os.Chown(filepath.Join(d, "key"), 4242, 4242) }, []string{"owned by uid 4242", "chown 0 DIR/key"}},
			setup{"vault of another user", func(d string) error { return os.Chown(filepath.Join(d, "vault.age"), 4242, 4242) }, []string{"owned by uid 4242"}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data := t.TempDir()
			v := openFile(t, data, noEnv)
			mustSet(t, v, "K", []byte("v"))
			dir := filepath.Join(data, "secrets")
			// The control: readable before.
			if _, err := v.Get("K"); err != nil {
				t.Fatal(err)
			}
			if err := c.break_(dir); err != nil {
				t.Fatal(err)
			}
			before := snapshotNoFollow(t, dir)
			subs := make([]string, len(c.subs))
			for i, s := range c.subs {
				subs[i] = strings.ReplaceAll(s, "DIR", dir)
			}
			_, err := v.Get("K")
			wantKind(t, "Get", err, ErrInsecure, subs...)
			_, err = v.List()
			wantKind(t, "List", err, ErrInsecure)
			wantKind(t, "Set", v.Set("K2", []byte("w")), ErrInsecure)
			wantKind(t, "Delete", v.Delete("K"), ErrInsecure)
			sameFiles(t, c.name, before, snapshotNoFollow(t, dir))
		})
	}
}

// snapshotNoFollow is snapshot without reading special files or
// following links: name → mode and content of regular files.
func snapshotNoFollow(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		s := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			s += string(b)
		}
		m[e.Name()] = s
	}
	return m
}

// TestConcurrentSetsGoroutines: many Vaults in one process setting at
// once lose nothing (each Vault has its own lock descriptor).
func TestConcurrentSetsGoroutines(t *testing.T) {
	data := t.TempDir()
	const workers, each = 8, 6
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			v, err := Open(Options{DataDir: data, LookupEnv: noEnv})
			if err != nil {
				errs <- err
				return
			}
			for i := range each {
				if err := v.Set(fmt.Sprintf("g%d-%d", w, i), []byte(fmt.Sprint(w, i))); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	names, err := openFile(t, data, noEnv).List()
	if err != nil || len(names) != workers*each {
		t.Fatalf("%d names after %d concurrent sets (%v): %v", len(names), workers*each, err, names)
	}
}

// TestConcurrentSetsProcesses: several processes setting at once, the
// first of them making the key, lose nothing and agree on one key.
func TestConcurrentSetsProcesses(t *testing.T) {
	data := t.TempDir()
	const procs, each = 5, 8
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*bytes.Buffer, procs)
	for p := range procs {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env = append(os.Environ(), fmt.Sprintf("%s=%s p%d %d", helperEnv, data, p, each), KeyEnv+"=")
		outs[p] = &bytes.Buffer{}
		c.Stdout, c.Stderr = outs[p], outs[p]
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[p] = c
	}
	for p, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("process %d: %v: %s", p, err, outs[p])
		}
	}
	v := openFile(t, data, noEnv)
	names, err := v.List()
	if err != nil || len(names) != procs*each {
		t.Fatalf("%d names after %d concurrent sets in %d processes (%v): %v", len(names), procs*each, procs, err, names)
	}
	if got, err := v.Get("p3-7"); err != nil || string(got) != "value of p3-7" {
		t.Errorf("p3-7 = %q, %v", got, err)
	}
}

// TestWrongKey: a vault opened with another identity (from the env var)
// is refused with a clear error on every operation, and nothing is
// rewritten; with the right key in the variable it opens, and no key
// file is read or written.
func TestWrongKey(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "secrets")
	mustSet(t, openFile(t, data, noEnv), "K", []byte("right"))
	other, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	wrong := openFile(t, data, envWith(KeyEnv, other.String()))
	before := snapshot(t, dir)
	msg := []string{"the vault cannot be decrypted with this key", "$" + KeyEnv, filepath.Join(dir, "vault.age")}
	_, err = wrong.Get("K")
	wantKind(t, "Get", err, ErrWrongKey, msg...)
	_, err = wrong.List()
	wantKind(t, "List", err, ErrWrongKey, msg...)
	wantKind(t, "Set", wrong.Set("K", []byte("clobber")), ErrWrongKey, msg...)
	wantKind(t, "Delete", wrong.Delete("K"), ErrWrongKey, msg...)
	if strings.Contains(fmt.Sprint(wrong.Set("K", []byte("x"))), other.String()) {
		t.Error("the error shows the key")
	}
	sameFiles(t, "wrong key", before, snapshot(t, dir))
	if got, err := openFile(t, data, noEnv).Get("K"); err != nil || string(got) != "right" {
		t.Errorf("with the right key: %q, %v", got, err)
	}

	// A vault made with the key in the variable: no key file, and
	// without the variable it cannot be opened (nor replaced).
	data2 := t.TempDir()
	dir2 := filepath.Join(data2, "secrets")
	withEnv := openFile(t, data2, envWith(KeyEnv, "  "+other.String()+"\n"))
	mustSet(t, withEnv, "E", []byte("from env key"))
	if _, err := os.Lstat(filepath.Join(dir2, "key")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key file was written although %s was set: %v", KeyEnv, err)
	}
	if got, err := withEnv.Get("E"); err != nil || string(got) != "from env key" {
		t.Errorf("env key: %q, %v", got, err)
	}
	before = snapshot(t, dir2)
	_, err = openFile(t, data2, noEnv).Get("E")
	wantKind(t, "Get without the key", err, ErrBadKey, filepath.Join(dir2, "key"), KeyEnv)
	wantKind(t, "Set without the key", openFile(t, data2, noEnv).Set("F", []byte("x")), ErrBadKey)
	sameFiles(t, "without the key", before, snapshot(t, dir2))
}

// TestBadKeyMaterial: a key file or variable that is not one age X25519
// identity is refused without showing what it holds; a variable of
// blanks only is no variable.
func TestBadKeyMaterial(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	id2, _ := age.GenerateX25519Identity()
	for name, content := range map[string]string{
		"garbage":       "not a key at all, SECRETSTUFF",
		"empty":         "# just a comment\n\n",
		"two keys":      id.String() + "\n" + id2.String() + "\n",
		"bad checksum":  id.String()[:len(id.String())-1] + "q",
		"a public key":  id.Recipient().String(),
		"ssh key":       "-----BEGIN OPENSSH PRIVATE KEY-----\nSECRETSTUFF\n",
		"uppercase bad": "AGE-SECRET-KEY-1SECRETSTUFF",
	} {
		t.Run(name, func(t *testing.T) {
			data := t.TempDir()
			dir := filepath.Join(data, "secrets")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "key"), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			err := openFile(t, data, noEnv).Set("K", []byte("v"))
			wantKind(t, "key file", err, ErrBadKey, filepath.Join(dir, "key"))
			if strings.Contains(err.Error(), "SECRETSTUFF") || strings.Contains(err.Error(), id.String()[20:]) {
				t.Errorf("the error shows the key material: %v", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "vault.age")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a vault was written with a bad key: %v", err)
			}
			err = openFile(t, t.TempDir(), envWith(KeyEnv, content)).Set("K", []byte("v"))
			wantKind(t, "variable", err, ErrBadKey, "$"+KeyEnv)
		})
	}
	data := t.TempDir()
	mustSet(t, openFile(t, data, envWith(KeyEnv, " \n")), "K", []byte("v"))
	if _, err := os.Stat(filepath.Join(data, "secrets", "key")); err != nil {
		t.Errorf("a blank %s did not fall back to the key file: %v", KeyEnv, err)
	}
}

// TestCorruptVault: a vault that is not age, is cut short, has been
// tampered with, or holds something other than our document is refused
// as damaged, and a set does not replace it.
func TestCorruptVault(t *testing.T) {
	encrypt := func(t *testing.T, data string, pt string) []byte {
		kf, _ := os.ReadFile(filepath.Join(data, "secrets", "key"))
		id, err := parseIdentity(string(kf), "test")
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		w, _ := age.Encrypt(&out, id.Recipient())
		io.WriteString(w, pt)
		w.Close()
		return out.Bytes()
	}
	cases := map[string]func(t *testing.T, data string, good []byte) []byte{
		"garbage":   func(*testing.T, string, []byte) []byte { return []byte("{\"secrets\":{}}") },
		"empty":     func(*testing.T, string, []byte) []byte { return nil },
		"truncated": func(_ *testing.T, _ string, g []byte) []byte { return g[:len(g)-10] },
		"flipped":   func(_ *testing.T, _ string, g []byte) []byte { g[len(g)-5] ^= 0x40; return g },
		"not json":  func(t *testing.T, d string, _ []byte) []byte { return encrypt(t, d, "hello") },
		"version 2": func(t *testing.T, d string, _ []byte) []byte { return encrypt(t, d, `{"version":2,"secrets":{}}`) },
		"bad name": func(t *testing.T, d string, _ []byte) []byte {
			return encrypt(t, d, `{"version":1,"secrets":{"a b":"eA=="}}`)
		},
		"bad base64": func(t *testing.T, d string, _ []byte) []byte {
			return encrypt(t, d, `{"version":1,"secrets":{"K":"!!"}}`)
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			data := t.TempDir()
			v := openFile(t, data, noEnv)
			mustSet(t, v, "K", []byte("v"))
			p := filepath.Join(data, "secrets", "vault.age")
			good, _ := os.ReadFile(p)
			if err := os.WriteFile(p, damage(t, data, good), 0o600); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, filepath.Join(data, "secrets"))
			_, err := v.Get("K")
			wantKind(t, "Get", err, ErrCorrupt, p)
			_, err = v.List()
			wantKind(t, "List", err, ErrCorrupt)
			wantKind(t, "Set", v.Set("K", []byte("w")), ErrCorrupt)
			wantKind(t, "Delete", v.Delete("K"), ErrCorrupt)
			sameFiles(t, name, before, snapshot(t, filepath.Join(data, "secrets")))
		})
	}
}

// TestBadNamesAndValues: names outside [A-Za-z0-9_-]{1,128} and empty or
// oversized values are refused before anything is read or written.
func TestBadNamesAndValues(t *testing.T) {
	data := t.TempDir()
	v := openFile(t, data, noEnv)
	for _, k := range []string{"", "a b", "a/b", "../key", "K=V", "K:host", "é", "a\x00b", "a\nb", "a.b", strings.Repeat("k", 129)} {
		wantKind(t, fmt.Sprintf("Set(%q)", k), v.Set(k, []byte("v")), ErrInvalidKey, "invalid secret name")
		_, err := v.Get(k)
		wantKind(t, fmt.Sprintf("Get(%q)", k), err, ErrInvalidKey)
		wantKind(t, fmt.Sprintf("Delete(%q)", k), v.Delete(k), ErrInvalidKey)
		if err := CheckKey(k); err == nil {
			t.Errorf("CheckKey(%q) accepted it", k)
		}
	}
	if err := v.Set("a\nb", []byte("v")); strings.Contains(err.Error(), "a\nb") {
		t.Errorf("a control character in a name is printed raw: %q", err)
	}
	for _, k := range []string{"a", "A-Z_0-9", strings.Repeat("k", 128)} {
		if err := CheckKey(k); err != nil {
			t.Errorf("CheckKey(%q): %v", k, err)
		}
	}
	wantKind(t, "empty value", v.Set("K", nil), ErrInvalidValue, "empty")
	wantKind(t, "oversized value", v.Set("K", make([]byte, MaxValueSize+1)), ErrInvalidValue, "64 KiB")
	if _, err := os.Stat(data + "/secrets"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused calls wrote something: %v", err)
	}
	mustSet(t, v, strings.Repeat("k", 128), make([]byte, MaxValueSize))
}
