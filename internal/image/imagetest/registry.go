package imagetest

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an in-memory OCI registry serving plain HTTP on 127.0.0.1.
type Registry struct {
	// Host is "127.0.0.1:PORT", the registry part of references.
	Host string
	// URL is "http://127.0.0.1:PORT".
	URL    string
	Server *httptest.Server

	user, pass   string
	requests     atomic.Int64
	blobRequests atomic.Int64
}

// RegistryOption configures NewRegistry.
type RegistryOption func(*registryConfig)

type registryConfig struct {
	user, pass  string
	middlewares []func(http.Handler) http.Handler
}

// WithBasicAuth makes the registry demand HTTP basic auth with these
// credentials on every /v2/ request.
func WithBasicAuth(user, pass string) RegistryOption {
	return func(c *registryConfig) { c.user, c.pass = user, pass }
}

// WithMiddleware wraps the registry handler (e.g. with a Throttle).
func WithMiddleware(mw func(http.Handler) http.Handler) RegistryOption {
	return func(c *registryConfig) { c.middlewares = append(c.middlewares, mw) }
}

// NewRegistry starts a registry for the duration of the test.
func NewRegistry(t testing.TB, opts ...RegistryOption) *Registry {
	t.Helper()
	var c registryConfig
	for _, o := range opts {
		o(&c)
	}
	r := &Registry{user: c.user, pass: c.pass}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	for _, mw := range c.middlewares {
		h = mw(h)
	}
	if c.user != "" {
		h = basicAuth(h, c.user, c.pass)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobRequests.Add(1)
		}
		inner.ServeHTTP(w, req)
	})
	r.Server = httptest.NewServer(h)
	t.Cleanup(r.Server.Close)
	r.URL = r.Server.URL
	r.Host = strings.TrimPrefix(r.URL, "http://")
	return r
}

func basicAuth(next http.Handler, user, pass string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="imagetest"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// Requests is the number of HTTP requests served so far.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// BlobRequests is the number of blob GETs served so far.
func (r *Registry) BlobRequests() int64 { return r.blobRequests.Load() }

// Ref returns "HOST/repoTag".
func (r *Registry) Ref(repoTag string) string { return r.Host + "/" + repoTag }

func (r *Registry) writeOptions() []remote.Option {
	if r.user == "" {
		return nil
	}
	return []remote.Option{remote.WithAuth(&authn.Basic{Username: r.user, Password: r.pass})}
}

// Push uploads img as HOST/repoTag and returns that reference.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.writeOptions()...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.String()
}

// PushIndex uploads a multi-arch index (and its images) as HOST/repoTag.
func (r *Registry) PushIndex(t testing.TB, repoTag string, idx v1.ImageIndex) string {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repoTag))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx, r.writeOptions()...); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	return ref.String()
}

// DockerConfig writes a Docker config directory holding basic-auth
// credentials for host and returns it, for use as $DOCKER_CONFIG.
func DockerConfig(t testing.TB, host, user, pass string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := map[string]any{"auths": map[string]any{
		host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))},
	}}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Throttle slows blob downloads while Enabled: bodies are written Chunk
// bytes at a time with Delay between chunks. Started is closed when the
// first throttled chunk has been sent.
type Throttle struct {
	Enabled atomic.Bool
	Chunk   int
	Delay   time.Duration
	Started chan struct{}
	once    atomic.Bool
}

// NewThrottle returns an enabled throttle.
func NewThrottle(chunk int, delay time.Duration) *Throttle {
	th := &Throttle{Chunk: chunk, Delay: delay, Started: make(chan struct{})}
	th.Enabled.Store(true)
	return th
}

// Middleware is the throttling handler wrapper for WithMiddleware.
func (th *Throttle) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !th.Enabled.Load() || req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/blobs/") {
			next.ServeHTTP(w, req)
			return
		}
		next.ServeHTTP(&slowWriter{ResponseWriter: w, th: th, req: req}, req)
	})
}

type slowWriter struct {
	http.ResponseWriter
	th  *Throttle
	req *http.Request
}

func (s *slowWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if err := s.req.Context().Err(); err != nil {
			return n, err
		}
		c := min(len(p), s.th.Chunk)
		w, err := s.ResponseWriter.Write(p[:c])
		n += w
		if err != nil {
			return n, err
		}
		if f, ok := s.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		if s.th.once.CompareAndSwap(false, true) {
			close(s.th.Started)
		}
		p = p[c:]
		select {
		case <-s.req.Context().Done():
			return n, s.req.Context().Err()
		case <-time.After(s.th.Delay):
		}
	}
	return n, nil
}
