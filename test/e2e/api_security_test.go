//go:build linux

package e2e

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// The API's defences against other users of the machine and against web
// pages, on real `serve` and daemon processes: keys (made, kept, never on
// a command line), the unix socket (peer uid), --insecure-no-auth.
// browser_attack_test.go attacks it from a real browser.

// waitLog waits up to 10 s for serve's stderr to hold substr (the access
// log line of a request is written after its answer).
func (s *apiServer) waitLog(substr string) bool {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(s.errb.String(), substr) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// readKey reads the first line of a key file.
func readKey(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
}

// TestServeKeyFile: with no key given, serve makes <data-dir>/api-key
// (0600, in a 0700 data dir it creates), says where it is and how to
// export it, requires it over TCP, and uses the same file next time. A
// key file others could read or have planted is refused.
func TestServeKeyFile(t *testing.T) {
	a := newAK(t)
	a.dataDir = filepath.Join(a.dataDir, "new", "data")
	path := filepath.Join(a.dataDir, "api-key")

	s := startServe(t, a, "listening on ", "serve", "--port", "0")
	s.url = strings.TrimSpace(s.url)
	out := s.errb.String()
	if !strings.Contains(out, "generated an API key for the HTTP API in "+path) || !strings.Contains(out, `export AGENTKERNEL_API_KEY="$(cat `+path+`)"`) {
		t.Errorf("serve does not say where the new key is and how to export it:\n%s", out)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if di, err := os.Stat(a.dataDir); err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("data dir made with %v (%v), want 0700", di.Mode(), err)
	}
	key := readKey(t, path)
	if !strings.HasPrefix(key, "ak_") || len(key) != 3+43 {
		t.Errorf("key %q is not ak_ and 32 bytes of base64url", key)
	}
	s.raw("GET", "/status", "", "Authorization", "").expect(t, "TCP without a key", 401, "Missing Authorization header")
	r := s.raw("GET", "/status", "", "Authorization", "Bearer "+key)
	r.expect(t, "the generated key", 200, "")
	if !bytes.Contains(r.env["data"], []byte(`"api_key_configured":true`)) {
		t.Errorf("status: %s", r.body)
	}
	s.stop()

	s2 := startServe(t, a, "listening on ", "serve", "--port", "0")
	s2.url = strings.TrimSpace(s2.url)
	if out := s2.errb.String(); !strings.Contains(out, "API key from "+path) || strings.Contains(out, "generated") {
		t.Errorf("second start does not reuse the key file:\n%s", out)
	}
	if got := readKey(t, path); got != key {
		t.Errorf("the key file changed: %q, was %q", got, key)
	}
	s2.raw("GET", "/status", "", "Authorization", "Bearer "+key).expect(t, "the same key on the second start", 200, "")
	s2.stop()
	if strings.Contains(s.errb.String()+s2.errb.String(), key) {
		t.Errorf("the key was printed or logged")
	}

	// Refused: readable by others, a symlink, someone else's file.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(path, 0o640))
	if r := a.run("serve", "--port", "0"); r.code != 125 || !strings.Contains(r.stderr, "can be read or written by other users (mode 0640)") || !strings.Contains(r.stderr, "chmod 600") {
		t.Errorf("group-readable key file: %v", r)
	}
	must(os.Chmod(path, 0o600))
	must(os.Rename(path, path+".real"))
	must(os.Symlink(path+".real", path))
	if r := a.run("serve", "--port", "0"); r.code != 125 || !strings.Contains(r.stderr, "symbolic link") {
		t.Errorf("symlinked key file: %v", r)
	}
	must(os.Remove(path))
	must(os.Rename(path+".real", path))
	must(os.Chown(path, 65534, 65534))
	if r := a.run("serve", "--port", "0"); r.code != 125 || !strings.Contains(r.stderr, "belongs to uid 65534") {
		t.Errorf("key file of another user: %v", r)
	}
	must(os.Chown(path, 0, 0))
	must(os.WriteFile(path, []byte("\n# nothing\n"), 0o600))
	if r := a.run("serve", "--port", "0"); r.code != 125 || !strings.Contains(r.stderr, "holds no key") {
		t.Errorf("empty key file: %v", r)
	}
}

// TestServeKeySources: a key given by the environment or a file is used
// and no key file is made; --api-key works but warns.
func TestServeKeySources(t *testing.T) {
	a := newAK(t)
	a.env = []string{"AGENTKERNEL_API_KEY=from-env"}
	s := startServe(t, a, "listening on ", "serve", "--port", "0")
	s.url = strings.TrimSpace(s.url)
	s.raw("GET", "/status", "", "Authorization", "Bearer from-env").expect(t, "key from the environment", 200, "")
	s.stop()
	if _, err := os.Stat(filepath.Join(a.dataDir, "api-key")); err == nil {
		t.Errorf("a key file was made although a key was given")
	}
	a.env = nil

	// A project's own agentkernel.toml cannot choose the key: it is
	// ignored with a warning, and the data dir's key is used.
	if err := os.WriteFile(filepath.Join(a.dir, "agentkernel.toml"), []byte("[api]\napi_key = \"planted-by-the-repo\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, a, "listening on ", "serve", "--port", "0")
	s.url = strings.TrimSpace(s.url)
	if out := s.errb.String(); !strings.Contains(out, "[api] api_key is ignored") {
		t.Errorf("no warning for the project's api_key:\n%s", out)
	}
	s.raw("GET", "/status", "", "Authorization", "Bearer planted-by-the-repo").expect(t, "the project's key", 401, "Invalid API key")
	s.raw("GET", "/status", "", "Authorization", "Bearer "+readKey(t, filepath.Join(a.dataDir, "api-key"))).expect(t, "the data dir's key", 200, "")
	s.stop()

	// A key source given but unusable is a usage error naming it.
	a.env = []string{"AGENTKERNEL_API_KEY="}
	if r := a.run("serve", "--port", "0"); r.code != 125 || !strings.Contains(r.stderr, "$AGENTKERNEL_API_KEY is set but empty") || !strings.Contains(r.stderr, "hint: ") {
		t.Errorf("empty $AGENTKERNEL_API_KEY: %v", r)
	}
	a.env = nil
	big := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(big, bytes.Repeat([]byte("k"), 64<<10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.run("serve", "--port", "0", "--api-key-file", big); r.code != 125 || !strings.Contains(r.stderr, "--api-key-file "+big+": more than 64 KiB") {
		t.Errorf("key file over 64 KiB: %v", r)
	}
	s = startAPI(t, "--api-key", apiKey)
	if out := s.errb.String(); !strings.Contains(out, "--api-key puts the key on the command line") || !strings.Contains(out, "--api-key-file") || !strings.Contains(out, "AGENTKERNEL_API_KEY") {
		t.Errorf("--api-key without the warning:\n%s", out)
	}
}

// TestServeInsecureNoAuth: no key over TCP only when asked, loudly; web
// pages are still refused.
func TestServeInsecureNoAuth(t *testing.T) {
	s := startAPI(t, "--insecure-no-auth")
	if out := s.errb.String(); !strings.Contains(out, "WARNING: --insecure-no-auth") || !strings.Contains(out, "other users of this machine") {
		t.Errorf("no warning:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(s.a.dataDir, "api-key")); err == nil {
		t.Errorf("--insecure-no-auth made a key file")
	}
	r := s.raw("GET", "/status", "", "Authorization", "")
	r.expect(t, "no key needed", 200, "")
	if !bytes.Contains(r.env["data"], []byte(`"api_key_configured":false`)) {
		t.Errorf("status: %s", r.body)
	}
	s.raw("POST", "/run", `{"command":["true"],"image":"host"}`, "Authorization", "", "Content-Type", "text/plain").expect(t, "text/plain", 415, "*")
	s.raw("GET", "/status", "", "Authorization", "", "Host", "evil.example").expect(t, "rebinding", 403, "*")
	s.raw("GET", "/status", "", "Authorization", "", "Origin", "http://evil.example").expect(t, "foreign origin", 403, "*")

	a := newAK(t)
	if r := a.run("serve", "--port", "0", "--insecure-no-auth", "--api-key", "x"); r.code != 125 || !strings.Contains(r.stderr, "contradict") {
		t.Errorf("--insecure-no-auth with --api-key: %v", r)
	}
}

// sockRequest sends one raw HTTP/1.1 request over a unix socket, as
// `curl --unix-socket` would, and returns the whole answer.
func sockRequest(t *testing.T, sock, method, path, contentType, body string) string {
	t.Helper()
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		t.Fatalf("connect %s: %v", sock, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	req := method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\nConnection: close\r\n"
	if body != "" {
		req += "Content-Type: " + contentType + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"+body); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// otherUser is a user the test creates (like rootlessAK's) and setpriv
// to run a program as it.
func otherUser(t *testing.T) (uid, gid string, setpriv string) {
	t.Helper()
	testenv.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Missing(t, "needs setpriv (util-linux)")
	}
	const name = "aktestuser"
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/bin/false", name).CombinedOutput(); err != nil {
			testenv.Missing(t, "cannot create a test user: %v %s", err, out)
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u.Uid, u.Gid, setpriv
}

// sockClient builds testdata/sockclient into a directory every user can
// read.
func sockClient(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ak-sockclient-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sockclient")
	build := exec.Command("go", "build", "-o", bin, "./testdata/sockclient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sockclient: %v\n%s", err, out)
	}
	return bin
}

// checkOtherUserRefused opens sock (and the directories in open) to
// everyone, then has another user ask for /status and for a run that
// would write marker: both must answer 403; the same client as the
// server's own user is served (so the client works).
func checkOtherUserRefused(t *testing.T, sock, marker string, open ...string) {
	t.Helper()
	uid, gid, setpriv := otherUser(t)
	client := sockClient(t)
	for _, d := range open {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(client, sock, "GET", "/status").CombinedOutput(); err != nil || !strings.Contains(string(out), "status 200") {
		t.Fatalf("sockclient as the server's own user: %v %s", err, out)
	}
	body := `{"command":["sh","-c","echo other-user > ` + filepath.Join("/workspace", filepath.Base(marker)) + `"],"image":"host","profile":"permissive"}`
	for _, req := range [][]string{{"GET", "/status"}, {"GET", "/health"}, {"POST", "/run", body}} {
		args := append([]string{"--reuid=" + uid, "--regid=" + gid, "--clear-groups", client, sock}, req...)
		out, _ := exec.Command(setpriv, args...).CombinedOutput()
		if !strings.Contains(string(out), "status 403") || !strings.Contains(string(out), "serves only its owner") {
			t.Errorf("uid %s on the socket (mode 0666), %s %s: %s", uid, req[0], req[1], out)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the other user's run wrote %s", marker)
	}
}

// TestServeUnixSocket: serve --unix: the socket alone, mode 0600, raw
// HTTP without a key for the server's own user, the other checks still
// on; in-use and non-socket paths refused, a stale socket replaced;
// another uid refused even on a socket opened to everyone.
func TestServeUnixSocket(t *testing.T) {
	a := newAK(t)
	dir, err := os.MkdirTemp("", "ak-unix-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ak.sock")
	s := startServe(t, a, "serving unix socket ", "serve", "--unix", sock)
	if out := s.errb.String(); strings.Contains(out, "listening on http") {
		t.Errorf("--unix alone also serves TCP:\n%s", out)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	if ans := sockRequest(t, sock, "GET", "/status", "", ""); !strings.HasPrefix(ans, "HTTP/1.1 200") || !strings.Contains(ans, `"api_key_configured":false`) {
		t.Errorf("GET /status over the socket:\n%s", ans)
	}
	if ans := sockRequest(t, sock, "POST", "/run", "application/json", `{"command":["sh","-c","echo via-socket"],"image":"host"}`); !strings.HasPrefix(ans, "HTTP/1.1 200") || !strings.Contains(ans, `via-socket\n`) {
		t.Errorf("POST /run over the socket:\n%s", ans)
	}
	if ans := sockRequest(t, sock, "POST", "/run", "text/plain", `{"command":["true"],"image":"host"}`); !strings.HasPrefix(ans, "HTTP/1.1 415") {
		t.Errorf("text/plain over the socket:\n%s", ans)
	}
	if _, err := os.Stat(filepath.Join(a.dataDir, "api-key")); err == nil {
		t.Errorf("--unix alone made a key file")
	}
	if r := a.run("serve", "--unix", sock); r.code != 125 || !strings.Contains(r.stderr, "in use") {
		t.Errorf("second server on the socket: %v", r)
	}
	checkOtherUserRefused(t, sock, filepath.Join(a.dir, "marker-other-user"), dir)
	if !s.waitLog("route=forbidden_peer status=403") {
		t.Errorf("the other user's refusals are not in the access log:\n%s", s.errb.String())
	}
	s.stop()
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("socket left behind after stop")
	}

	// A stale socket is replaced; anything else is not.
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	s = startServe(t, a, "serving unix socket ", "serve", "--unix", sock, "--port", "0")
	if !s.waitLog("listening on http://") {
		t.Errorf("--unix with --port does not serve TCP too:\n%s", s.errb.String())
	}
	s.stop()
	if err := os.WriteFile(sock, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := a.run("serve", "--unix", sock); r.code != 125 || !strings.Contains(r.stderr, "not a socket") {
		t.Errorf("regular file at the socket path: %v", r)
	}
	if b, _ := os.ReadFile(sock); string(b) != "data" {
		t.Errorf("the file at the socket path was replaced")
	}
}

// freePort is a TCP port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// tcpStatus is GET /status at addr with key ("" none): the status code.
func tcpStatus(t *testing.T, addr, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/status", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET /status at %s: %v", addr, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestDaemonAPIKeys: 'daemon start --api-key K' hands K to the daemon
// through a pipe: it is on no command line and in no environment (nor
// are the keys of $AGENTKERNEL_API_KEY and of the variable [api]
// api_key_env names, which 'daemon start' had), the TCP listener
// requires it, the unix socket serves its own user without it and
// refuses other users. Without a key, --tcp uses the data dir's.
func TestDaemonAPIKeys(t *testing.T) {
	a := newAK(t)
	addr := "127.0.0.1:" + freePort(t)
	const key = "daemon-only-key-7f3a9c"
	const envKey, cfgEnvKey = "env-key-0b1e2d", "cfg-env-key-94c3aa"
	userCfg := filepath.Join(a.home, ".config", "agentkernel", "config.toml")
	if err := os.MkdirAll(filepath.Dir(userCfg), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(userCfg, []byte("[api]\napi_key_env = \"MY_AK_KEY\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.env = []string{"AGENTKERNEL_API_KEY=" + envKey, "MY_AK_KEY=" + cfgEnvKey, "AK_TEST_MARKER=kept"}
	r := a.run("daemon", "start", "--tcp", addr, "--api-key", key)
	if r.code != 0 {
		t.Fatalf("daemon start: %v", r)
	}
	t.Cleanup(func() { a.run("daemon", "stop") })
	if !strings.Contains(r.stderr, "--api-key puts the key on the command line") {
		t.Errorf("daemon start --api-key without the warning: %v", r)
	}
	b, err := os.ReadFile(filepath.Join(a.dataDir, "daemon", "daemon.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(cmdline, []byte(key)) || !bytes.Contains(cmdline, []byte("--api-key-fd")) {
		t.Errorf("daemon command line: %q", bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
	}
	environ, err := os.ReadFile("/proc/" + pid + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte("AK_TEST_MARKER=kept\x00")) {
		t.Fatalf("/proc/%s/environ is not the daemon's environment: %q", pid, environ)
	}
	for _, k := range []string{key, envKey, cfgEnvKey} {
		if bytes.Contains(environ, []byte(k)) {
			t.Errorf("the key %q is in the daemon's environment", k)
		}
	}
	// Even an environment is readable by the same uid only.
	if fi, err := os.Stat("/proc/" + pid + "/environ"); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("/proc/%s/environ: %v %v", pid, fi, err)
	}
	if got := tcpStatus(t, addr, ""); got != 401 {
		t.Errorf("daemon TCP without a key: %d", got)
	}
	if got := tcpStatus(t, addr, key); got != 200 {
		t.Errorf("daemon TCP with the key: %d", got)
	}
	sock := filepath.Join(a.dataDir, "daemon", "api.sock")
	if ans := sockRequest(t, sock, "GET", "/status", "", ""); !strings.HasPrefix(ans, "HTTP/1.1 200") {
		t.Errorf("daemon socket, own user, no key:\n%s", ans)
	}
	checkOtherUserRefused(t, sock, filepath.Join(a.dir, "marker-daemon-other-user"), filepath.Dir(a.dataDir), a.dataDir, filepath.Join(a.dataDir, "daemon"))
	if log, _ := os.ReadFile(filepath.Join(a.dataDir, "daemon", "daemon.log")); bytes.Contains(log, []byte(key)) {
		t.Errorf("the daemon logged the key")
	}
	a.must("daemon", "stop")

	// --tcp without a key: the data dir's key, made by 'daemon start',
	// which says where it is.
	a.env = nil
	r = a.run("daemon", "start", "--tcp", addr)
	if r.code != 0 || !strings.Contains(r.stderr, "generated an API key for the HTTP API in "+filepath.Join(a.dataDir, "api-key")) {
		t.Fatalf("daemon start --tcp without a key: %v", r)
	}
	made := readKey(t, filepath.Join(a.dataDir, "api-key"))
	if got := tcpStatus(t, addr, made); got != 200 {
		t.Errorf("daemon TCP with the made key: %d", got)
	}
	if got := tcpStatus(t, addr, key); got != 401 {
		t.Errorf("daemon TCP with the old key: %d", got)
	}
	a.must("daemon", "stop")
}
