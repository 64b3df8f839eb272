package api

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// routes returns the route table: net/http.ServeMux patterns (method and
// wildcards), each handler wrapped by route. The pattern is also the
// route's name in the access log and the metrics.
//
// What the contract asks beyond ServeMux (routable does the rest):
//   - every unknown path, and a known path with another method, is a
//     404 with the JSON envelope: "/" catches them (ServeMux's own 404
//     and 405 answers are text);
//   - "/sandboxes/{name}/files" is listed for all methods so that a GET
//     of it is that 404, not a redirect to ".../files/", the empty path
//     under the files route;
//   - GET patterns also answer HEAD (ServeMux does this itself).
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(pattern string, k routeKind, h http.HandlerFunc) {
		mux.Handle(pattern, s.route(pattern, k, h))
	}
	handle("GET /health", open, s.health)
	handle("GET /status", short, s.status)
	handle("GET /stats", short, s.stats)
	handle("GET /metrics", short, s.serveMetrics)
	handle("GET /openapi.yaml", short, s.openapi)
	handle("GET /doctor", long, s.doctor)
	handle("POST /gc", long, s.gc)
	handle("POST /run", long, s.run)
	handle("POST /run/stream", long, s.runStream)
	handle("POST /batch/run", long, s.batchRun)

	handle("GET /sandboxes", short, s.listSandboxes)
	handle("POST /sandboxes", long, s.createSandbox)
	handle("GET /sandboxes/{name}", short, s.getSandbox)
	handle("PATCH /sandboxes/{name}", short, s.patchSandbox)
	handle("DELETE /sandboxes/{name}", long, s.removeSandbox)
	handle("POST /sandboxes/{name}/start", long, s.startSandbox)
	handle("POST /sandboxes/{name}/stop", long, s.stopSandbox)
	handle("POST /sandboxes/{name}/exec", long, s.execSandbox)
	handle("POST /sandboxes/{name}/extend", short, s.extendSandbox)
	handle("GET /sandboxes/{name}/logs", short, s.logs)
	handle("POST /sandboxes/{name}/files", short, s.writeFiles)
	handle("GET /sandboxes/{name}/files/{path...}", short, s.readFile)
	handle("PUT /sandboxes/{name}/files/{path...}", short, s.writeFile)
	handle("DELETE /sandboxes/{name}/files/{path...}", short, s.deleteFile)

	handle("GET /snapshots", short, s.listSnapshots)
	handle("POST /snapshots", long, s.takeSnapshot)
	handle("GET /snapshots/{name}", short, s.getSnapshot)
	handle("DELETE /snapshots/{name}", long, s.deleteSnapshot)
	handle("POST /snapshots/{name}/restore", short, s.restoreSnapshot)
	handle("POST /sandboxes/{name}/exec/detach", long, s.execDetach)
	handle("GET /sandboxes/{name}/exec/detached", short, s.detachedList)
	handle("GET /sandboxes/{name}/exec/detached/{id}", short, s.detachedStatus)
	handle("GET /sandboxes/{name}/exec/detached/{id}/logs", long, s.detachedLogs)
	handle("DELETE /sandboxes/{name}/exec/detached/{id}", long, s.detachedKill)
	// GET /sandboxes/by-uuid/{uuid}, and the 404 of the rest (detached.go).
	handle("/sandboxes/{name}/{sub}", short, s.sandboxSub)

	if s.opts.MCP != nil {
		mcp := s.route("/mcp", long, s.opts.MCP.ServeHTTP)
		mux.Handle("/mcp", mcp)
		mux.Handle("/mcp/", mcp)
	}
	notFound := s.route("not_found", short, func(w http.ResponseWriter, _ *http.Request) {
		writeErr(w, http.StatusNotFound, "Not found")
	})
	mux.Handle("/sandboxes/{name}/files", notFound)
	mux.Handle("/", notFound)
	return mux
}

// routeKind says how a route is served.
type routeKind int

const (
	// short: a key is needed; the answer must be written within
	// WriteTimeout.
	short routeKind = iota
	// open: no key is needed (GET /health).
	open
	// long: the route runs commands, which take as long as they take:
	// no write deadline.
	long
)

// route wraps a route's handler: it names the route for the access log,
// authenticates the request (the 401 of a missing key comes before the
// 404 of an unknown route, as the contract says) and sets the
// connection's deadlines.
func (s *Server) route(name string, k routeKind, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sw, ok := w.(*statusWriter); ok {
			sw.route = name
		}
		if !s.authorized(w, r, k == open) {
			if sw, ok := w.(*statusWriter); ok {
				sw.route = "unauthorized"
			}
			return
		}
		now := time.Now()
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(now.Add(s.opts.ReadTimeout))
		if k != long {
			_ = rc.SetWriteDeadline(now.Add(s.opts.WriteTimeout))
		}
		h(w, r)
	})
}

// routable returns r as the route table matches it. Empty path segments
// are dropped ("//sandboxes//x/" is /sandboxes/x: SDKs send files//tmp/a
// for absolute paths). ServeMux would answer a path with "." or ".."
// segments with a redirect to its cleaned form, where the contract wants
// the handler's answer (a 400 for ".." in a file's path): such segments
// are escaped ("%2E") for matching, and ServeMux unescapes them again in
// PathValue. Segments are split on the decoded path, so an escaped
// slash ("%2F") separates segments too.
func routable(r *http.Request) *http.Request {
	seg := segments(r.URL.Path)
	raw := make([]string, len(seg))
	for i, s := range seg {
		switch s {
		case ".":
			raw[i] = "%2E"
		case "..":
			raw[i] = "%2E%2E"
		default:
			raw[i] = url.PathEscape(s)
		}
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = "/"+strings.Join(seg, "/"), "/"+strings.Join(raw, "/")
	r2.URL = &u
	// ServeMux answers "OPTIONS *" with a bare 400; here it is a path
	// like any other.
	r2.RequestURI = u.RequestURI()
	return r2
}

// segments splits a path on '/' and drops empty segments.
func segments(p string) []string {
	parts := strings.Split(p, "/")
	out := parts[:0]
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
