package netlab

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// fixtureTime is the modification time of every file the fixtures hold,
// so that they are the same bytes on every run.
func fixtureTime() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

type fixtures struct {
	wheelName string
	wheel     []byte
	tgz       []byte
	git       http.Handler // nil where git is missing
	gitHead   string
}

func newFixtures(dir string) (*fixtures, error) {
	f := &fixtures{}
	var err error
	f.wheelName, f.wheel, err = BuildWheel()
	if err != nil {
		return nil, err
	}
	f.tgz, err = BuildNPMTarball()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("git"); err == nil {
		f.git, f.gitHead, err = newGitRepo(filepath.Join(dir, "git"))
		if err != nil {
			return nil, err
		}
	}
	return f, nil
}

// BuildWheel builds the lab's pure-Python wheel: package netlab_hello,
// whose GREETING is PythonGreeting. It returns the wheel's file name
// and its bytes.
func BuildWheel() (string, []byte, error) {
	mod := strings.ReplaceAll(PythonPackage, "-", "_")
	distInfo := fmt.Sprintf("%s-%s.dist-info", mod, PythonVersion)
	files := []struct{ name, body string }{
		{mod + "/__init__.py", fmt.Sprintf("GREETING = %q\n", PythonGreeting)},
		{distInfo + "/METADATA", fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: netlab test package\n\n", PythonPackage, PythonVersion)},
		{distInfo + "/WHEEL", "Wheel-Version: 1.0\nGenerator: netlab\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name, body string) error {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: fixtureTime()})
		if err != nil {
			return err
		}
		_, err = w.Write([]byte(body))
		return err
	}
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
		if err := add(f.name, f.body); err != nil {
			return "", nil, err
		}
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", distInfo)
	if err := add(distInfo+"/RECORD", record.String()); err != nil {
		return "", nil, err
	}
	if err := zw.Close(); err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("%s-%s-py3-none-any.whl", mod, PythonVersion), buf.Bytes(), nil
}

// BuildNPMTarball builds the lab's npm package tarball (package/
// package.json and package/index.js, exporting greeting NPMGreeting).
func BuildNPMTarball() ([]byte, error) {
	pkg, err := json.Marshal(map[string]string{
		"name": NPMPackage, "version": NPMVersion, "main": "index.js", "license": "MIT",
		"description": "netlab test package",
	})
	if err != nil {
		return nil, err
	}
	files := []struct{ name, body string }{
		{"package/package.json", string(pkg) + "\n"},
		{"package/index.js", fmt.Sprintf("module.exports = { greeting: %q };\n", NPMGreeting)},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: fixtureTime(), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// normalizeProject is PEP 503's normalised name: lower case, each run
// of "-", "_" and "." one "-".
func normalizeProject(name string) string {
	var b strings.Builder
	sep := false
	for _, r := range strings.ToLower(name) {
		if r == '-' || r == '_' || r == '.' {
			sep = true
			continue
		}
		if sep {
			b.WriteByte('-')
			sep = false
		}
		b.WriteRune(r)
	}
	if sep {
		b.WriteByte('-')
	}
	return b.String()
}

// servePyPI is a PEP 503 simple index with one project, and its files.
func (f *fixtures) servePyPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/simple/":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body>\n<a href=\"/simple/%s/\">%s</a>\n</body></html>\n", PythonPackage, PythonPackage)
	case strings.HasPrefix(p, "/simple/"):
		name := strings.Trim(strings.TrimPrefix(p, "/simple/"), "/")
		if normalizeProject(name) != PythonPackage {
			http.NotFound(w, r)
			return
		}
		if !strings.HasSuffix(p, "/") {
			http.Redirect(w, r, p+"/", http.StatusMovedPermanently)
			return
		}
		sum := sha256.Sum256(f.wheel)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body>\n<a href=\"/files/%s#sha256=%s\">%s</a>\n</body></html>\n",
			html.EscapeString(f.wheelName), hex.EncodeToString(sum[:]), html.EscapeString(f.wheelName))
	case p == "/files/"+f.wheelName:
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, f.wheelName, fixtureTime(), bytes.NewReader(f.wheel))
	default:
		http.NotFound(w, r)
	}
}

// serveNPM is an npm registry with one package: its packument and its
// tarball, whose URL names the host the client asked for.
func (f *fixtures) serveNPM(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	tgzName := fmt.Sprintf("%s-%s.tgz", NPMPackage, NPMVersion)
	switch r.URL.Path {
	case "/npm/" + NPMPackage:
		scheme := "https"
		if r.TLS == nil {
			scheme = "http"
		}
		sha := sha1.Sum(f.tgz)
		s512 := sha512.Sum512(f.tgz)
		version := map[string]any{
			"name": NPMPackage, "version": NPMVersion, "main": "index.js", "license": "MIT",
			"dist": map[string]string{
				"tarball":   fmt.Sprintf("%s://%s/npm/%s/-/%s", scheme, r.Host, NPMPackage, tgzName),
				"shasum":    hex.EncodeToString(sha[:]),
				"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]),
			},
		}
		doc := map[string]any{
			"name":      NPMPackage,
			"dist-tags": map[string]string{"latest": NPMVersion},
			"versions":  map[string]any{NPMVersion: version},
			"modified":  fixtureTime().Format(time.RFC3339),
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	case "/npm/" + NPMPackage + "/-/" + tgzName:
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, tgzName, fixtureTime(), bytes.NewReader(f.tgz))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintln(w, `{"error":"not found"}`)
	}
}

// gitEnv is the environment of the lab's git commands: no user or
// system configuration, a fixed author and date.
func gitEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=netlab", "GIT_AUTHOR_EMAIL=netlab@netlab.test",
		"GIT_COMMITTER_NAME=netlab", "GIT_COMMITTER_EMAIL=netlab@netlab.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	}
}

// newGitRepo makes dir/lab.git, a bare repository with one commit on
// main (GitFile holding GitContent), and the smart-HTTP handler that
// serves dir under /git/.
func newGitRepo(dir string) (http.Handler, string, error) {
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, "", err
	}
	env := gitEnv(dir)
	run := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Env = env
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("netlab: git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return strings.TrimSpace(string(out)), nil
	}
	if err := os.WriteFile(filepath.Join(work, GitFile), []byte(GitContent), 0o644); err != nil {
		return nil, "", err
	}
	steps := [][]string{
		{"init", "-q", "--initial-branch=main", work},
		{"-C", work, "add", GitFile},
		{"-C", work, "commit", "-q", "-m", "netlab"},
		{"clone", "-q", "--bare", work, filepath.Join(dir, "lab.git")},
	}
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			return nil, "", err
		}
	}
	head, err := run("-C", filepath.Join(dir, "lab.git"), "rev-parse", "HEAD")
	if err != nil {
		return nil, "", err
	}
	execPath, err := run("--exec-path")
	if err != nil {
		return nil, "", err
	}
	backend := filepath.Join(execPath, "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, "", fmt.Errorf("netlab: git http-backend: %w", err)
	}
	h := &cgi.Handler{
		Path: backend,
		Root: "/git",
		Dir:  dir,
		Env:  append(env, "GIT_PROJECT_ROOT="+dir, "GIT_HTTP_EXPORT_ALL=1"),
	}
	return h, head, nil
}
