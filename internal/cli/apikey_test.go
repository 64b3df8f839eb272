package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// keyApp is an App whose stderr is returned, with a private data dir,
// working directory (cwd) and user config directory ($XDG_CONFIG_HOME),
// and none of the key variables set.
func keyApp(t *testing.T) (a *App, stderr *bytes.Buffer, cwd, userDir string) {
	t.Helper()
	base := t.TempDir()
	cwd, userDir = filepath.Join(base, "project"), filepath.Join(base, "xdg")
	for _, d := range []string{cwd, filepath.Join(userDir, "agentkernel")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(cwd)
	t.Setenv("XDG_CONFIG_HOME", userDir)
	t.Setenv("AGENTKERNEL_API_KEY", "")
	os.Unsetenv("AGENTKERNEL_API_KEY")
	stderr = &bytes.Buffer{}
	a = NewApp(runcli.App{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: stderr})
	a.DataDir = filepath.Join(base, "data")
	return a, stderr, cwd, userDir
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTrustedAPI: a project's own agentkernel.toml (the one found in the
// working directory) cannot set [api] api_key, api_key_env, allowed_hosts
// or allowed_origins: each is ignored with a warning that names it, and
// the user config's value stands even where the project file replaced
// it. The user config, and a file given with --config, are honoured.
func TestTrustedAPI(t *testing.T) {
	a, stderr, cwd, userDir := keyApp(t)
	project := `[api]
api_key = "attacker-key"
api_key_env = "ATTACKER_KNOWS_THIS"
allowed_hosts = ["evil.example"]
allowed_origins = ["http://evil.example"]
allow_sudo_exec = true
`
	writeFile(t, filepath.Join(cwd, "agentkernel.toml"), project)
	user := filepath.Join(userDir, "agentkernel", "config.toml")
	writeFile(t, user, "[api]\nallowed_hosts = [\"MyBox.lan\"]\napi_key = \"user-key\"\n")

	cfg, err := a.LoadConfig(cwd)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.API.APIKey != "attacker-key" || !slices.Equal(cfg.API.AllowedHosts, []string{"evil.example"}) {
		t.Fatalf("the project file did not replace the user's values in the merged config (the case under test): %+v", cfg.API)
	}
	got, err := a.trustedAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := config.API{APIKey: "user-key", AllowedHosts: []string{"mybox.lan"}}
	if got.APIKey != want.APIKey || got.APIKeyEnv != "" || !slices.Equal(got.AllowedHosts, want.AllowedHosts) || len(got.AllowedOrigins) != 0 || got.AllowSudoExec {
		t.Errorf("trustedAPI = %+v, want the user's values %+v", got, want)
	}
	for _, key := range []string{"api_key", "api_key_env", "allowed_hosts", "allowed_origins", "allow_sudo_exec"} {
		if !strings.Contains(stderr.String(), "agentkernel.toml:") || !strings.Contains(stderr.String(), "[api] "+key+" is ignored") {
			t.Errorf("no warning naming [api] %s:\n%s", key, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "attacker-key") {
		t.Errorf("a warning shows the key:\n%s", stderr.String())
	}

	// The keys the server would accept: never the project's.
	t.Setenv("ATTACKER_KNOWS_THIS", "attacker-env-key")
	keys, err := a.serverKeys(keySources{}, got, true, false)
	if err != nil || !slices.Equal(keys, []string{"user-key"}) {
		t.Errorf("serverKeys = %q, %v; want the user config's key", keys, err)
	}
	hosts, origins, err := a.apiAccess(got, []string{"flag.example"}, []string{"http://localhost:3000"})
	if err != nil || !slices.Equal(hosts, []string{"flag.example", "mybox.lan"}) || !slices.Equal(origins, []string{"http://localhost:3000"}) {
		t.Errorf("apiAccess = %q %q %v", hosts, origins, err)
	}

	// Without a user config the project's key is still not taken: the
	// data dir's key is made.
	if err := os.Remove(user); err != nil {
		t.Fatal(err)
	}
	cfg, err = a.LoadConfig(cwd)
	if err != nil {
		t.Fatal(err)
	}
	got, err = a.trustedAPI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	keys, err = a.serverKeys(keySources{}, got, true, false)
	if err != nil || len(keys) != 1 || !strings.HasPrefix(keys[0], "ak_") {
		t.Errorf("no user config: serverKeys = %q, %v; want a generated key", keys, err)
	}

	// The same file named with --config is the user's choice.
	stderr.Reset()
	a.ConfigPath = filepath.Join(cwd, "agentkernel.toml")
	cfg, err = a.LoadConfig(cwd)
	if err != nil {
		t.Fatal(err)
	}
	got, err = a.trustedAPI(cfg)
	if err != nil || got.APIKey != "attacker-key" || got.APIKeyEnv != "ATTACKER_KNOWS_THIS" ||
		!slices.Equal(got.AllowedHosts, []string{"evil.example"}) || !slices.Equal(got.AllowedOrigins, []string{"http://evil.example"}) {
		t.Errorf("--config: trustedAPI = %+v, %v; want the file's values", got, err)
	}
	if strings.Contains(stderr.String(), "is ignored") {
		t.Errorf("--config: warned:\n%s", stderr.String())
	}

	// The user config alone: honoured, silently.
	a.ConfigPath = ""
	stderr.Reset()
	if err := os.Remove(filepath.Join(cwd, "agentkernel.toml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, user, "[api]\napi_key_env = \"MY_AK_KEY\"\nallowed_origins = [\"http://localhost:3000\"]\n")
	cfg, err = a.LoadConfig(cwd)
	if err != nil {
		t.Fatal(err)
	}
	got, err = a.trustedAPI(cfg)
	if err != nil || got.APIKeyEnv != "MY_AK_KEY" || !slices.Equal(got.AllowedOrigins, []string{"http://localhost:3000"}) || stderr.Len() != 0 {
		t.Errorf("user config: trustedAPI = %+v, %v; stderr %q", got, err, stderr.String())
	}
	t.Setenv("MY_AK_KEY", "from-my-var")
	if keys, _, err := a.apiKeys(keySources{}, got); err != nil || !slices.Equal(keys, []string{"from-my-var"}) {
		t.Errorf("api_key_env of the user config: %q %v", keys, err)
	}
}

// keyPipe is the read end of a pipe that holds data, as a descriptor
// number of its own (apiKeys closes it, as the daemon does).
func keyPipe(t *testing.T, data []byte) int {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	go func() {
		pw.Write(data)
		pw.Close()
	}()
	fd, err := syscall.Dup(int(pr.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// expectKeyError checks a key-read error: a usage error (exit code 125
// and a hint), naming what.
func expectKeyError(t *testing.T, name string, err error, what string) {
	t.Helper()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || ee.Hint == "" || !strings.Contains(ee.Error(), what) {
		t.Errorf("%s: %v (%#v), want a usage error naming %s with a hint", name, err, ee, what)
	}
}

// TestAPIKeySources: each key source that is given but holds no usable
// key is an error, never "no key" (which would fall back to another
// key) nor a cut-short key.
func TestAPIKeySources(t *testing.T) {
	a, _, _, _ := keyApp(t)
	dir := t.TempDir()

	// Over 64 KiB: refused, not cut at 64 KiB and the rest accepted.
	big := filepath.Join(dir, "big")
	writeFile(t, big, strings.Repeat("k", maxKeyBytes)+"tail\n")
	keys, _, err := a.apiKeys(keySources{keyFile: big}, config.API{})
	expectKeyError(t, "key file over 64 KiB", err, "--api-key-file "+big)
	if len(keys) != 0 {
		t.Errorf("key file over 64 KiB: keys %d", len(keys))
	}
	exact := filepath.Join(dir, "exact")
	writeFile(t, exact, strings.Repeat("k", maxKeyBytes-1)+"\n")
	if keys, _, err := a.apiKeys(keySources{keyFile: exact}, config.API{}); err != nil || len(keys) != 1 {
		t.Errorf("key file of exactly 64 KiB: %d keys, %v", len(keys), err)
	}

	// A FIFO: refused at once (reading one would wait for a writer).
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := a.apiKeys(keySources{keyFile: fifo}, config.API{})
		done <- err
	}()
	select {
	case err := <-done:
		expectKeyError(t, "FIFO", err, "not a regular file (a FIFO)")
	case <-time.After(5 * time.Second):
		// Unblock the reader so the test ends.
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("--api-key-file FIFO: start-up hangs")
	}
	_, _, err = a.apiKeys(keySources{keyFile: "/dev/null"}, config.API{})
	expectKeyError(t, "device", err, "a character device")
	_, _, err = a.apiKeys(keySources{keyFile: dir}, config.API{})
	expectKeyError(t, "directory", err, "a directory")
	_, _, err = a.apiKeys(keySources{keyFile: filepath.Join(dir, "missing")}, config.API{})
	expectKeyError(t, "missing file", err, "no such file")
	comments := filepath.Join(dir, "comments")
	writeFile(t, comments, "# only a comment\n\n")
	_, _, err = a.apiKeys(keySources{keyFile: comments}, config.API{})
	expectKeyError(t, "key file without a key", err, "holds no key")

	// An empty descriptor, an empty variable, an empty flag.
	_, _, err = a.apiKeys(keySources{keyFD: keyPipe(t, []byte("\n  \n"))}, config.API{})
	expectKeyError(t, "empty descriptor", err, "holds no key")
	_, _, err = a.apiKeys(keySources{keyFD: keyPipe(t, bytes.Repeat([]byte("k"), maxKeyBytes+1))}, config.API{})
	expectKeyError(t, "descriptor over 64 KiB", err, "--api-key-fd")

	t.Setenv("AGENTKERNEL_API_KEY", " ")
	_, _, err = a.apiKeys(keySources{}, config.API{})
	expectKeyError(t, "empty $AGENTKERNEL_API_KEY", err, "$AGENTKERNEL_API_KEY is set but empty")
	os.Unsetenv("AGENTKERNEL_API_KEY")
	t.Setenv("MY_AK_KEY", "")
	_, _, err = a.apiKeys(keySources{}, config.API{APIKeyEnv: "MY_AK_KEY", APIKey: "fallback"})
	expectKeyError(t, "empty api_key_env variable", err, "$MY_AK_KEY ([api] api_key_env) is set but empty")
	_, _, err = a.apiKeys(keySources{keys: []string{""}}, config.API{})
	expectKeyError(t, "empty --api-key", err, "--api-key")

	// Through serverKeys (what serve and daemon start call) they stay
	// usage errors with their hint.
	_, err = a.serverKeys(keySources{keyFile: big}, config.API{}, true, false)
	expectKeyError(t, "serverKeys", err, "more than 64 KiB")
	if _, err := os.Stat(filepath.Join(a.DataDir, keyFileName)); err == nil {
		t.Errorf("a key file was made although the given key source failed")
	}
}

// TestDataDirKeyDir: the generated key is neither read from nor written
// to a data directory that another user owns or may write to.
func TestDataDirKeyDir(t *testing.T) {
	a, _, _, _ := keyApp(t)
	if err := os.MkdirAll(a.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(a.DataDir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := a.dataDirKey()
	if err == nil || !strings.Contains(err.Error(), "can be written by other users (mode 0777)") {
		t.Errorf("world-writable data dir: %v", err)
	}
	if err := os.Chmod(a.DataDir, 0o770); err != nil {
		t.Fatal(err)
	}
	if _, err := a.dataDirKey(); err == nil || !strings.Contains(err.Error(), "mode 0770") {
		t.Errorf("group-writable data dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(a.DataDir, keyFileName)); err == nil {
		t.Errorf("a key file was written into the open data dir")
	}
	if err := os.Chmod(a.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	keys, err := a.dataDirKey()
	if err != nil || len(keys) != 1 {
		t.Fatalf("data dir 0755 of the caller: %q %v", keys, err)
	}
	if os.Geteuid() != 0 {
		testenv.Missing(t, "chown to another user needs root")
		return
	}
	if err := os.Chown(a.DataDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := a.dataDirKey(); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("data dir of another user: %v", err)
	}
}

// TestInsecureNoAuthWithoutTCP: --insecure-no-auth on a server without a
// TCP listener says it changes nothing.
func TestInsecureNoAuthWithoutTCP(t *testing.T) {
	a, stderr, _, _ := keyApp(t)
	if _, err := a.serverKeys(keySources{}, config.API{}, false, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "--insecure-no-auth has no effect without a TCP listener") {
		t.Errorf("no warning:\n%s", stderr.String())
	}
	stderr.Reset()
	if _, err := a.serverKeys(keySources{}, config.API{}, true, true); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "no effect") {
		t.Errorf("warned with a TCP listener:\n%s", stderr.String())
	}
}

// TestServeFlags: --allowed-origin, and --allow-origin, its former name,
// which still works, hidden from the help; the help text keeps "[api]
// api_key_env / api_key" together.
func TestServeFlags(t *testing.T) {
	dir := t.TempDir()
	for _, flag := range []string{"--allowed-origin", "--allow-origin"} {
		_, stderr, err := runCLI(t, dir, "serve", "--port", "0", flag, "ftp://bad.example")
		if err == nil || !strings.Contains(err.Error(), "--allowed-origin: allowed origin \"ftp://bad.example\"") {
			t.Errorf("serve %s ftp://bad.example: %v %s", flag, err, stderr)
		}
		if flag == "--allow-origin" && !strings.Contains(stderr, "former name of --allowed-origin") {
			t.Errorf("--allow-origin: no deprecation notice: %s", stderr)
		}
	}
	helps := [][]string{{"serve", "--help"}}
	if runtime.GOOS == "linux" {
		helps = append(helps, []string{"daemon", "start", "--help"})
	}
	for _, args := range helps {
		out, _, err := runCLI(t, dir, args...)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "--allowed-origin") || strings.Contains(out, "--allow-origin ") {
			t.Errorf("%v: --allowed-origin missing or --allow-origin shown:\n%s", args, out)
		}
		if args[0] == "serve" && !strings.Contains(out, "[api] api_key_env / api_key in your user") {
			t.Errorf("serve --help: the [api] keys are split:\n%s", out)
		}
	}
}
