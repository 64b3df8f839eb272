package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// MaxBody is the largest request body accepted (413 above it).
const MaxBody = 16 << 20

// RunSpec is what a request asks of a new sandbox; the face that starts
// the server turns it into a Spec (config, detection, policy).
type RunSpec struct {
	// Name is the persistent sandbox's name ("" for /run).
	Name    string
	Args    []string
	Image   string
	Profile string
	// VCPUs and MemoryMB are 0 when not given.
	VCPUs    int
	MemoryMB int
	// Network is the network mode asked for ("" when not given), with
	// its domain rules and published ports.
	Network      config.NetworkSetting
	AllowDomains []string
	BlockDomains []string
	Ports        []string
	// Backend is the backend the spec is for ("" native): a backend
	// whose sandboxes have loopback only (sandbox.LoopbackOnly) keeps a
	// profile's default egress to loopback, as the CLI does.
	Backend string
	// Secrets are secret bindings in the forms of 'run -S' (KEY:HOST,
	// KEY:HOST:HEADER, KEY=VALUE:HOST; a persistent sandbox, Name set,
	// takes no inline value). The resolver must never put a value in an
	// error.
	Secrets []string
}

// Options configures a Server.
type Options struct {
	// Manager does all the work.
	Manager *sandbox.Manager
	// Resolve turns a request into a fully resolved Spec (detection and
	// policy with the server's working directory). Its errors are the
	// caller's fault (400).
	Resolve func(ctx context.Context, r RunSpec) (*sandbox.Spec, error)
	// Keys are the accepted API keys. Requests over TCP must present one
	// (every route but GET /health) unless InsecureNoAuth; the server's
	// own user on a unix socket needs none (guard.go).
	Keys []string
	// InsecureNoAuth serves TCP requests without a key when Keys is
	// empty (throwaway set-ups; the CLI warns on every start).
	InsecureNoAuth bool
	// AllowedHosts are Host names accepted beyond localhost, *.localhost,
	// loopback and the listener's own addresses; "*" accepts any Host
	// (guard.go).
	AllowedHosts []string
	// AllowedOrigins are the web origins (scheme://host[:port]) whose
	// requests are served, with CORS answers; a request with any other
	// Origin header is refused.
	AllowedOrigins []string
	// AllowSudoExec lets exec requests ask for sudo (root).
	AllowSudoExec bool
	// Version and Backend are reported by /status and /stats. Backend
	// is also the backend of requests that name none (serve's [sandbox]
	// backend; default native); "native" is the Manager's own. Fast runs
	// take the warm pools of their backend, where it can prepare
	// sandboxes (pool.go).
	Version string
	Backend string
	// Logger receives the access log (one line per request) and errors.
	Logger *slog.Logger
	// MCP, when set, is mounted at /mcp behind the same checks and
	// authentication (the MCP server's streamable HTTP transport).
	MCP http.Handler
	// ReadTimeout bounds reading a request body, WriteTimeout writing
	// the answer of a route that runs no command (defaults 60 s).
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// BatchParallel bounds the commands of one /batch/run running at
	// once (default 4).
	BatchParallel int
	// Pool sizes the warm pools of fast runs (pool.go).
	Pool PoolOptions
	// Doctor answers GET /doctor (the host's checks, package doctor's
	// Report, probed for the server's user and configuration); nil: 404.
	Doctor func(r *http.Request) any
}

// Server is the HTTP API. Build it with New; it is an http.Handler.
type Server struct {
	opts Options
	keys [][sha256.Size]byte
	// uid is the server's effective uid: the one unix socket peer served.
	uid int
	// hosts and origins are the allowed Host names and Origins, lower
	// case; anyHost: AllowedHosts holds "*".
	hosts   map[string]struct{}
	anyHost bool
	origins map[string]struct{}
	started time.Time
	metrics *metrics
	pools   *pools
	mux     *http.ServeMux
	// wg counts requests in flight (for tests and shutdown).
	wg sync.WaitGroup
}

// New returns a Server.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 60 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 60 * time.Second
	}
	if o.BatchParallel <= 0 {
		o.BatchParallel = 4
	}
	if o.Backend == "" {
		o.Backend = "native"
	}
	s := &Server{opts: o, started: time.Now(), metrics: newMetrics(), uid: os.Geteuid(),
		hosts: map[string]struct{}{}, origins: map[string]struct{}{}}
	// The one normalisation of these lists is config's (the CLI's flags
	// and [api] went through it already; it is idempotent). An entry it
	// refuses allows nothing.
	for _, h := range o.AllowedHosts {
		n, err := config.NormalizeAllowedHost(h)
		if err != nil {
			o.Logger.Warn("allowed host ignored", "err", err)
			continue
		}
		if n == "*" {
			s.anyHost = true
		}
		s.hosts[n] = struct{}{}
	}
	for _, origin := range o.AllowedOrigins {
		n, err := config.NormalizeOrigin(origin)
		if err != nil {
			o.Logger.Warn("allowed origin ignored", "err", err)
			continue
		}
		s.origins[n] = struct{}{}
	}
	s.pools = newPools(o.Manager, o.Pool, func(msg string, args ...any) { o.Logger.Warn(msg, args...) })
	for _, k := range o.Keys {
		s.keys = append(s.keys, sha256.Sum256([]byte(k)))
	}
	s.mux = s.routes()
	return s
}

// Serve serves on every listener in lns (TCP and unix sockets) until ctx
// is done, then shuts down gracefully: requests in flight finish (their
// commands too) within grace, after which their contexts are cancelled,
// which stops their sandboxes. Each connection is tagged with how it
// arrived (the unix peer's uid, the TCP addresses) for guard.
func (s *Server) Serve(ctx context.Context, lns []net.Listener, grace time.Duration) error {
	if len(lns) == 0 {
		return errors.New("api: no listener to serve on")
	}
	base, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    1 << 20,
		BaseContext:       func(l net.Listener) context.Context { return context.WithValue(base, listenerKey{}, l.Addr()) },
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
	}
	// Every pooled sandbox is removed on the way out, whatever happens,
	// and the teardown of the last runs' sandboxes is waited for.
	defer s.opts.Manager.Drain()
	defer s.pools.close()
	if s.opts.Pool.Prewarm && s.opts.Resolve != nil {
		if spec, err := s.opts.Resolve(ctx, RunSpec{Args: []string{"true"}}); err == nil {
			// The pool of the server's own backend, which requests that
			// name none take.
			if spec.Backend, err = s.backend(""); err != nil {
				s.opts.Logger.Warn("warm pool: the server's backend", "error", err)
			}
			_ = s.pools.prewarm(spec, 0)
		} else {
			s.opts.Logger.Warn("warm pool: cannot resolve the default spec", "error", err)
		}
	}
	errc := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { errc <- hs.Serve(ln) }()
	}
	// A listener whose Serve had not started by the shutdown would stay
	// open (a unix socket's file left behind): close each one ourselves.
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	select {
	case err := <-errc:
		_ = hs.Close()
		return err
	case <-ctx.Done():
	}
	s.opts.Logger.Info("shutting down", "grace", grace)
	sctx, scancel := context.WithTimeout(context.Background(), grace)
	defer scancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		// Past the grace period: cancel the commands still running
		// (their sandboxes are removed) and wait for their handlers.
		cancel()
		_ = hs.Close()
	}
	s.wg.Wait()
	if errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

// ServeHTTP checks (guard.go), routes (router.go: authentication comes
// with the route), and logs one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.wg.Add(1)
	defer s.wg.Done()
	start := time.Now()
	rw := &statusWriter{ResponseWriter: w}
	refused := s.guard(rw, r)
	if refused == "" {
		s.mux.ServeHTTP(rw, routable(r))
	}
	name := rw.route
	if refused != "" {
		name = refused
	}
	took := time.Since(start)
	s.metrics.request(name, rw.code(), took)
	attrs := []any{"method", r.Method, "path", r.URL.Path, "route", name,
		"status", rw.code(), "bytes", rw.n, "duration_ms", float64(took.Microseconds()) / 1000, "remote", remote(r)}
	if refused != "" && refused != "preflight" {
		// What was refused, clipped (the values are the client's).
		attrs = append(attrs, "host", clip(r.Host), "origin", clip(r.Header.Get("Origin")), "content_type", clip(r.Header.Get("Content-Type")))
	}
	s.opts.Logger.Info("request", attrs...)
}

// remote names the client for the access log: its TCP address, or
// "unix uid=N" on a unix socket.
func remote(r *http.Request) string {
	if ci := connOf(r); ci.unix {
		return fmt.Sprintf("unix uid=%d", ci.peerUID)
	}
	return r.RemoteAddr
}

// authorized checks the Authorization header (every route but GET
// /health: noKey) and writes the 401 itself when it fails. The server's
// own user on a unix socket (checked by guard) needs no key; without
// keys, TCP requests pass only with InsecureNoAuth.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, noKey bool) bool {
	if ci := connOf(r); noKey || (ci.unix && ci.peerUID == s.uid && ci.peerOwnNS) || (len(s.keys) == 0 && s.opts.InsecureNoAuth) {
		return true
	}
	h, ok := r.Header["Authorization"]
	if !ok || len(h) == 0 {
		writeErr(w, http.StatusUnauthorized, "Missing Authorization header")
		return false
	}
	token, ok := strings.CutPrefix(h[0], "Bearer ")
	if !ok {
		writeErr(w, http.StatusUnauthorized, "Invalid authorization format. Use: Bearer <api_key>")
		return false
	}
	sum := sha256.Sum256([]byte(token))
	match := 0
	for i := range s.keys {
		match |= subtle.ConstantTimeCompare(sum[:], s.keys[i][:])
	}
	if match != 1 {
		writeErr(w, http.StatusUnauthorized, "Invalid API key")
		return false
	}
	return true
}

// statusWriter remembers the status and size of the answer, and the
// name of the route that wrote it (router.go).
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
	route  string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// flushes).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
