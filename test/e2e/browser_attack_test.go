//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// The drive-by attack on a local agentkernel API, from a real browser:
// a web page the user visits (here served by the test from another
// loopback origin) sends requests that a browser sends without asking
// the target (no CORS preflight): a no-cors fetch of text/plain, and
// auto-submitted HTML forms (text/plain, urlencoded, multipart); and one
// fetch of application/json, which the browser preflights. Each body
// asks for a command that would write a marker file into serve's
// project directory.
//
// Positive control: the page first attacks a recording server of the
// test, which must receive every one of those requests as the browser
// sent them (so a browser that stopped sending them would fail the
// test, not pass it). Then the same attacks against `agentkernel serve`
// must leave no marker, and serve's access log must show the refusals.
// A DNS-rebinding Host cannot be forged by a page, so the Host rule is
// covered with raw HTTP. Finally, the very same command sent as an API
// client sends it does write its marker (the markers would show a
// successful attack).

// attackPage is the evil page. Its query names the two targets.
const attackPage = `<!doctype html>
<html><head><title>cat pictures</title></head><body>
<script>
const q = new URLSearchParams(location.search);
const targets = [["recorder", q.get("rec")], ["agentkernel", q.get("ak")]];
const results = [];
function body(tag) {
  return JSON.stringify({command: ["sh", "-c", "echo pwned > /workspace/marker-" + tag], image: "host", profile: "permissive"});
}
function submitForm(base, tag, enctype, fields) {
  return new Promise(resolve => {
    const frame = document.createElement("iframe");
    frame.name = "frame-" + tag;
    document.body.appendChild(frame);
    const form = document.createElement("form");
    form.method = "POST";
    form.action = base + "/run";
    form.enctype = enctype;
    form.target = frame.name;
    for (const [k, v] of fields) {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = k;
      input.value = v;
      form.appendChild(input);
    }
    document.body.appendChild(form);
    let done = false;
    const finish = how => { if (!done) { done = true; results.push(tag + ": " + how); resolve(); } };
    frame.addEventListener("load", () => finish("form answered"));
    setTimeout(() => finish("form timed out"), 15000);
    form.submit();
  });
}
async function attack(who, base) {
  try {
    await fetch(base + "/run", {method: "POST", mode: "no-cors", body: body(who + "-fetch")});
    results.push(who + "-fetch: sent");
  } catch (e) { results.push(who + "-fetch: " + e); }
  // text/plain form whose body is valid JSON: name + "=" + value.
  const b = body(who + "-form-text");
  await submitForm(base, who + "-form-text", "text/plain", [[b.slice(0, -1) + ',"pad":"', '"}']]);
  await submitForm(base, who + "-form-url", "application/x-www-form-urlencoded", [["json", body(who + "-form-url")]]);
  await submitForm(base, who + "-form-multi", "multipart/form-data", [["json", body(who + "-form-multi")]]);
  try {
    const r = await fetch(base + "/run", {method: "POST", headers: {"Content-Type": "application/json"}, body: body(who + "-cors-json")});
    results.push(who + "-cors-json: status " + r.status);
  } catch (e) { results.push(who + "-cors-json: " + e); }
}
(async () => {
  for (const [who, base] of targets) await attack(who, base);
  await fetch("/report", {method: "POST", body: JSON.stringify(results)});
})();
</script>
</body></html>`

// seen is one request the recording server received.
type seen struct {
	method, path, contentType, origin, body string
}

func TestBrowserAttack(t *testing.T) {
	chromium := "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		p, err := exec.LookPath("chromium")
		if err != nil {
			testenv.Missing(t, "needs Chromium for the browser attack test (apt-get install chromium)")
		}
		chromium = p
	}
	testenv.RequireRoot(t)
	for _, mode := range []struct {
		name string
		args []string
	}{
		// The default: a key in <data-dir>/api-key.
		{"default", nil},
		// No key at all: the browser checks alone must hold.
		{"insecure-no-auth", []string{"--insecure-no-auth"}},
	} {
		t.Run(mode.name, func(t *testing.T) { browserAttack(t, chromium, mode.args) })
	}
}

func browserAttack(t *testing.T, chromium string, serveArgs []string) {
	s := startAPI(t, serveArgs...)
	s.url = strings.TrimSpace(s.url)
	key := ""
	if len(serveArgs) == 0 {
		key = readKey(t, filepath.Join(s.a.dataDir, "api-key"))
	}
	proj := s.a.dir

	// The recording server: answers every request with 200, no CORS.
	var mu sync.Mutex
	var got []seen
	rec := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Origin"), string(b)})
		mu.Unlock()
		fmt.Fprint(w, "ok")
	}))
	defer rec.Close()

	// The evil site, on another origin.
	report := make(chan []string, 1)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, attackPage)
		case "/report":
			var res []string
			_ = json.NewDecoder(r.Body).Decode(&res)
			select {
			case report <- res:
			default:
			}
		default:
			http.NotFound(w, r)
		}
	}))
	defer evil.Close()

	page := evil.URL + "/?rec=" + url.QueryEscape(rec.URL) + "&ak=" + url.QueryEscape(s.url)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+t.TempDir(), page)
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME=" + home, "XDG_CACHE_HOME=" + home}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var chromeOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &chromeOut, &chromeOut
	// The browser and its helpers are one process group of the test's.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	var waitErr error
	stopBrowser := func() {
		once.Do(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			waitErr = <-exited
		})
	}
	defer stopBrowser()
	var results []string
	select {
	case results = <-report:
	case waitErr = <-exited:
		once.Do(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		t.Fatalf("chromium exited before the page reported (%v):\n%s", waitErr, chromeOut.String())
	case <-ctx.Done():
		stopBrowser()
		t.Fatalf("the page did not report within the time limit; chromium said:\n%s", chromeOut.String())
	}
	stopBrowser()
	t.Logf("the page saw: %q", results)

	// Positive control: the browser delivered every attack to the
	// recorder, from the evil origin.
	mu.Lock()
	recorded := append([]seen(nil), got...)
	mu.Unlock()
	for _, want := range []struct {
		what, method, ctPrefix, bodyPart string
	}{
		{"no-cors fetch", "POST", "text/plain", "marker-recorder-fetch"},
		{"text/plain form", "POST", "text/plain", `marker-recorder-form-text"],"image":"host","profile":"permissive","pad":"="}`},
		{"urlencoded form", "POST", "application/x-www-form-urlencoded", "marker-recorder-form-url"},
		{"multipart form", "POST", "multipart/form-data", "marker-recorder-form-multi"},
		{"preflight of the JSON fetch", "OPTIONS", "", ""},
	} {
		found := false
		for _, r := range recorded {
			if r.method == want.method && r.path == "/run" && strings.HasPrefix(r.contentType, want.ctPrefix) &&
				strings.Contains(r.body, want.bodyPart) && r.origin == evil.URL {
				found = true
			}
		}
		if !found {
			t.Errorf("positive control: the browser did not deliver the %s to the recorder; it got %+v", want.what, recorded)
		}
	}

	// The same attacks on agentkernel: nothing ran.
	time.Sleep(500 * time.Millisecond)
	if m, _ := filepath.Glob(filepath.Join(proj, "marker-*")); len(m) > 0 {
		t.Errorf("the page's commands ran: %v", m)
	}
	// ... and the refusals are in its access log, from the page's origin
	// (the last attack's line may still be on its way).
	s.waitLog("method=OPTIONS path=/run route=forbidden_origin")
	var refusedPOST, refusedPreflight int
	for _, line := range strings.Split(s.errb.String(), "\n") {
		if !strings.Contains(line, "msg=request") || !strings.Contains(line, "path=/run") {
			continue
		}
		if strings.Contains(line, "route=") && !strings.Contains(line, "route=forbidden_") {
			t.Errorf("a request of the page reached a route: %s", line)
		}
		if strings.Contains(line, "route=forbidden_origin status=403") && strings.Contains(line, "origin="+evil.URL) {
			switch {
			case strings.Contains(line, "method=POST"):
				refusedPOST++
			case strings.Contains(line, "method=OPTIONS"):
				refusedPreflight++
			}
		}
	}
	if refusedPOST < 4 || refusedPreflight < 1 {
		t.Errorf("access log: %d POSTs and %d preflights refused as forbidden_origin, want 4 and 1:\n%s", refusedPOST, refusedPreflight, s.errb.String())
	}

	// DNS rebinding (a Host a page cannot forge in a fetch) and a
	// text/plain body without Origin, on the wire.
	body := func(tag string) string {
		return `{"command":["sh","-c","echo pwned > /workspace/marker-` + tag + `"],"image":"host","profile":"permissive"}`
	}
	auth := "Bearer " + key
	if key == "" {
		auth = ""
	}
	s.raw("POST", "/run", body("rebinding"), "Authorization", auth, "Host", "evil.example:"+portOf(s.url)).expect(t, "rebinding Host", 403, "Forbidden: Host*")
	s.raw("POST", "/run", body("rebinding-ip"), "Authorization", auth, "Host", "127.0.0.1.evil.example").expect(t, "rebinding Host that starts like an IP", 403, "Forbidden: Host*")
	s.raw("POST", "/run", body("text-plain"), "Authorization", auth, "Content-Type", "text/plain;charset=UTF-8").expect(t, "text/plain without Origin", 415, "*")
	if m, _ := filepath.Glob(filepath.Join(proj, "marker-*")); len(m) > 0 {
		t.Errorf("raw attacks ran: %v", m)
	}
	for _, route := range []string{"route=forbidden_host status=403", "route=unsupported_media_type status=415"} {
		if !s.waitLog(route) {
			t.Errorf("access log lacks %s", route)
		}
	}

	// The markers would have shown an attack: the same command, sent as
	// an API client sends it, writes its marker.
	s.raw("POST", "/run", body("control"), "Authorization", auth).expect(t, "the same command from an API client", 200, "")
	if _, err := os.Stat(filepath.Join(proj, "marker-control")); err != nil {
		t.Errorf("positive control: the API client's run wrote no marker: %v", err)
	}
}

// portOf is the port of an http://host:port URL.
func portOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Port()
}
