package api

import (
	"context"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// The rules applied to every request before routing and authentication,
// in this order (guard):
//
//  1. Who is connected. Over a unix socket, the peer's uid (SO_PEERCRED)
//     must be the server's: other users are refused whatever the file's
//     mode. A peer of that uid in another user or PID namespace than the
//     server's (inside a rootless sandbox, whose user namespace maps its
//     ids to the caller's, when the socket file is in its workspace or a
//     volume) must send the API key. Over TCP, the Host header must name this server: localhost
//     (or a *.localhost name), a loopback address, the address the
//     client connected to (any local interface address when the
//     listener is bound to 0.0.0.0 or ::), or a name the user allowed.
//     A web page that re-points its own DNS name at 127.0.0.1 (DNS
//     rebinding) sends its own name, and is refused.
//  2. Origin. Browsers send it with every cross-origin request and every
//     POST; API clients do not. A request that carries one is refused
//     unless the origin is allowed, and only allowed origins get CORS
//     answers (preflights included).
//  3. Content-Type. A body must be application/json. HTML forms and
//     "simple" fetches (text/plain, urlencoded, multipart) are what a
//     page can send cross-origin without a preflight; none of them can
//     carry application/json.
//  4. The API key (authorized), unless the peer is the server's own user
//     in the server's own namespaces on the unix socket.

// connInfo is how a connection arrived (http.Server.ConnContext).
type connInfo struct {
	unix bool
	// peerUID is the unix peer's effective uid at connect time; -1 when
	// it cannot be known.
	peerUID int
	// peerOwnNS: the unix peer runs in the server's user and PID
	// namespaces (not inside a sandbox); only then does the server's uid
	// go without a key.
	peerOwnNS bool
	// local is the TCP connection's local address: the address the
	// client dialled.
	local netip.Addr
	// anyAddr: the TCP listener is bound to 0.0.0.0 or ::.
	anyAddr bool
}

type connKey struct{}
type listenerKey struct{}

// connContext tags a new connection with how it arrived.
func connContext(ctx context.Context, c net.Conn) context.Context {
	ci := &connInfo{peerUID: -1}
	if uc, ok := c.(*net.UnixConn); ok {
		ci.unix = true
		if uid, ownNS, ok := peerOf(uc); ok {
			ci.peerUID, ci.peerOwnNS = uid, ownNS
		}
		return context.WithValue(ctx, connKey{}, ci)
	}
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		ci.local = a.AddrPort().Addr().Unmap().WithZone("")
	}
	if la, ok := ctx.Value(listenerKey{}).(*net.TCPAddr); ok && (la.IP == nil || la.IP.IsUnspecified()) {
		ci.anyAddr = true
	}
	return context.WithValue(ctx, connKey{}, ci)
}

// connOf is the request's connInfo. A request that did not come through
// Serve (a handler mounted elsewhere, tests) counts as TCP from an
// unknown address: only loopback names and allowed hosts pass.
func connOf(r *http.Request) *connInfo {
	if ci, ok := r.Context().Value(connKey{}).(*connInfo); ok {
		return ci
	}
	return &connInfo{peerUID: -1}
}

// corsAllowHeaders are the request headers an allowed origin may send.
const corsAllowHeaders = "Authorization, Content-Type, Mcp-Session-Id, Mcp-Protocol-Version, Last-Event-ID"

// guard applies rules 1-3 above. It writes the answer of a refusal (or of
// a CORS preflight) itself and returns its route name for the access log
// and metrics; "" lets the request go on to authentication and routing.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) string {
	ci := connOf(r)
	if ci.unix {
		if ci.peerUID < 0 || ci.peerUID != s.uid {
			writeErr(w, http.StatusForbidden, fmt.Sprintf("Forbidden: this socket serves only its owner (uid %d); other users must connect over TCP with an API key", s.uid))
			return "forbidden_peer"
		}
		if !ci.peerOwnNS && !s.keyMatches(r) {
			writeErr(w, http.StatusForbidden, "Forbidden: this connection comes from a process in another user or PID namespace than the server's (inside a sandbox or a container), which needs the API key here (Authorization: Bearer <key>)")
			return "forbidden_peer_ns"
		}
	} else if !s.hostAllowed(r.Host, ci) {
		msg := "Forbidden: missing or malformed Host header (DNS rebinding protection)"
		if name := hostOnly(r.Host); name != "" {
			msg = fmt.Sprintf("Forbidden: Host %q is not a name of this server (DNS rebinding protection); to allow it start the server with --allowed-host %s (or [api] allowed_hosts)", clip(r.Host), clip(name))
		}
		writeErr(w, http.StatusForbidden, msg)
		return "forbidden_host"
	}
	if vals, has := r.Header["Origin"]; has {
		origin := ""
		if len(vals) == 1 {
			origin = vals[0]
		}
		if _, ok := s.origins[strings.ToLower(origin)]; !ok || len(vals) != 1 {
			writeErr(w, http.StatusForbidden, fmt.Sprintf("Forbidden: requests from web pages are refused (Origin %q); to allow a page start the server with --allowed-origin ORIGIN (or [api] allowed_origins)", clip(strings.Join(vals, ", "))))
			return "forbidden_origin"
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, PATCH, DELETE")
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", "600")
			if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
				h.Set("Access-Control-Allow-Private-Network", "true")
			}
			w.WriteHeader(http.StatusNoContent)
			return "preflight"
		}
		h.Set("Access-Control-Expose-Headers", "Mcp-Session-Id")
	}
	if hasBody(r) {
		cts := r.Header.Values("Content-Type")
		if len(cts) > 1 {
			// Which one counts differs between parsers (and proxies):
			// none does.
			writeErr(w, http.StatusUnsupportedMediaType, fmt.Sprintf("%d Content-Type headers: send exactly one, application/json", len(cts)))
			return "unsupported_media_type"
		}
		ct := r.Header.Get("Content-Type")
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			msg := "Missing Content-Type: request bodies must be application/json (curl: -H 'Content-Type: application/json')"
			if ct != "" {
				msg = fmt.Sprintf("Unsupported Content-Type %q: request bodies must be application/json (curl: -H 'Content-Type: application/json')", clip(ct))
			}
			writeErr(w, http.StatusUnsupportedMediaType, msg)
			return "unsupported_media_type"
		}
	}
	return ""
}

// hasBody reports whether the request carries a body: a Content-Length
// above 0, or chunked (length unknown).
func hasBody(r *http.Request) bool {
	if r.ContentLength != 0 {
		return true
	}
	for _, te := range r.TransferEncoding {
		if strings.EqualFold(te, "chunked") {
			return true
		}
	}
	return false
}

// hostAllowed is rule 1 for TCP.
func (s *Server) hostAllowed(hostport string, ci *connInfo) bool {
	if s.anyHost {
		return true
	}
	h := hostOnly(hostport)
	switch {
	case h == "":
		return false
	case h == "localhost" || strings.HasSuffix(h, ".localhost"):
		return true
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		ip = ip.Unmap().WithZone("")
		switch {
		case ip.IsLoopback():
			return true
		case ci.local.IsValid() && ip == ci.local:
			return true
		case ci.anyAddr && localInterfaceAddr(ip):
			return true
		}
		h = ip.String()
	}
	_, ok := s.hosts[h]
	return ok
}

// hostOnly is the host part of a Host header, lower-case, without port,
// brackets or a trailing dot.
func hostOnly(hostport string) string {
	h := strings.ToLower(strings.TrimSpace(hostport))
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return ""
		}
		rest := h[end+1:]
		if rest != "" && !validPort(strings.TrimPrefix(rest, ":")) {
			return ""
		}
		return h[1:end]
	}
	if strings.Count(h, ":") == 1 {
		host, port, _ := strings.Cut(h, ":")
		if !validPort(port) {
			return ""
		}
		h = host
	}
	return strings.TrimSuffix(h, ".")
}

// validPort reports whether p is a TCP port as a Host header carries it:
// decimal digits only, 1 to 65535.
func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n >= 1 && n <= 65535
}

// localInterfaceAddr reports whether ip is an address of this machine's
// interfaces (asked only for an IP literal that is neither loopback nor
// the connection's own address, on a listener bound to every address).
func localInterfaceAddr(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// clip keeps a client-supplied value short enough to echo in an error
// or a log line.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}
