package netpolicy

import (
	"bytes"
	"net"
	"net/netip"
	"strings"
)

// verdict is what the first bytes of a connection say.
type verdict int

const (
	needMore  verdict = iota // too few bytes to tell
	named                    // a TLS ClientHello or HTTP/1 request, complete; names may be empty
	opaque                   // another protocol
	malformed                // looks like TLS or HTTP, but is not valid: refused
)

// sniff reads the start of what a client sent: the SNI of a TLS
// ClientHello (kind KindSNI) or the Host of an HTTP/1 request (KindHost).
// The names are lower case, without a trailing dot; an IP literal stays
// one.
func sniff(b []byte) (v verdict, kind string, names []string) {
	if len(b) == 0 {
		return needMore, "", nil
	}
	switch {
	case b[0] == 0x16:
		v, name := sniffTLS(b)
		if v == named && name != "" {
			names = []string{name}
		}
		return v, KindSNI, names
	case isLetter(b[0]) || b[0] == '\r' || b[0] == '\n':
		// Servers skip empty lines before a request (RFC 9112, 2.2).
		rest := bytes.TrimLeft(b, "\r\n")
		if len(rest) == 0 {
			return needMore, "", nil
		}
		if !isLetter(rest[0]) {
			return opaque, "", nil
		}
		v, names := sniffHTTP(rest, len(b))
		return v, KindHost, names
	}
	return opaque, "", nil
}

// maxHandshake bounds a ClientHello.
const maxHandshake = inspectLimit - 1024

// sniffTLS collects the ClientHello from the handshake records at the
// start of b and returns its server name ("" when it has none).
func sniffTLS(b []byte) (verdict, string) {
	var hs []byte
	for {
		if len(b) < 5 {
			if len(b) >= 2 && b[1] != 3 {
				return opaque, ""
			}
			return needMore, ""
		}
		if b[0] != 0x16 {
			return malformed, ""
		}
		if b[1] != 3 {
			// Not TLS (or SSL 3): not something we can read.
			return opaque, ""
		}
		n := int(b[3])<<8 | int(b[4])
		if n == 0 || n > 1<<14 {
			return malformed, ""
		}
		if len(b) < 5+n {
			return needMore, ""
		}
		hs = append(hs, b[5:5+n]...)
		b = b[5+n:]
		if len(hs) >= 4 {
			if hs[0] != 1 { // ClientHello
				return malformed, ""
			}
			l := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
			if l > maxHandshake {
				return malformed, ""
			}
			if len(hs) >= 4+l {
				return parseClientHello(hs[4 : 4+l])
			}
		}
	}
}

// reader is a bounds-checked cursor over a message.
type reader struct {
	b  []byte
	ok bool
}

func (r *reader) bytes(n int) []byte {
	if !r.ok || n < 0 || n > len(r.b) {
		r.ok = false
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(b[0])<<8 | int(b[1])
}

// vec reads a vector with a length of lenBytes (1 or 2) bytes.
func (r *reader) vec(lenBytes int) *reader {
	n := r.u8()
	if lenBytes == 2 {
		n = n<<8 | r.u8()
	}
	b := r.bytes(n)
	return &reader{b: b, ok: r.ok}
}

// parseClientHello returns the host_name of a ClientHello's
// server_name extension.
func parseClientHello(body []byte) (verdict, string) {
	r := &reader{b: body, ok: true}
	r.bytes(2 + 32) // legacy_version, random
	if sid := r.vec(1); len(sid.b) > 32 {
		return malformed, ""
	}
	if cs := r.vec(2); len(cs.b)%2 != 0 || len(cs.b) == 0 {
		return malformed, ""
	}
	if cm := r.vec(1); len(cm.b) == 0 {
		return malformed, ""
	}
	if !r.ok {
		return malformed, ""
	}
	if len(r.b) == 0 {
		return named, "" // no extensions
	}
	exts := r.vec(2)
	if !r.ok || len(r.b) != 0 {
		return malformed, ""
	}
	name, seen := "", map[int]bool{}
	for len(exts.b) > 0 {
		typ := exts.u16()
		data := exts.vec(2)
		if !exts.ok {
			return malformed, ""
		}
		if seen[typ] {
			return malformed, "" // a duplicate extension is forbidden
		}
		seen[typ] = true
		if typ != 0 { // server_name
			continue
		}
		list := data.vec(2)
		if !data.ok || len(data.b) != 0 || len(list.b) == 0 {
			return malformed, ""
		}
		for len(list.b) > 0 {
			nt := list.u8()
			v := list.vec(2)
			if !list.ok {
				return malformed, ""
			}
			if nt != 0 {
				continue
			}
			if name != "" {
				return malformed, "" // one host_name only
			}
			n, ok := normalName(string(v.b))
			if !ok {
				return malformed, ""
			}
			name = n
		}
	}
	return named, name
}

// maxHTTPHead bounds an HTTP request's head.
const maxHTTPHead = inspectLimit

// sniffHTTP reads an HTTP/1 request head at the start of b and returns
// the names it asks for: its Host and the host of an absolute-form
// target.
func sniffHTTP(b []byte, total int) (verdict, []string) {
	// Method: a token of letters (servers differ in how they treat case),
	// then white space.
	i := 0
	for ; i < len(b) && i <= 24; i++ {
		c := b[i]
		if c == ' ' || c == '\t' {
			break
		}
		if !(isLetter(c) || c == '-' || c == '_') {
			return opaque, nil
		}
	}
	if i == len(b) {
		return needMore, nil
	}
	if i > 24 {
		return opaque, nil
	}
	end := bytes.IndexByte(b, '\n')
	if end < 0 {
		if total >= maxHTTPHead {
			return malformed, nil
		}
		return needMore, nil
	}
	line := strings.TrimSuffix(string(b[:end]), "\r")
	parts := strings.Fields(line)
	if len(parts) == 0 || !strings.HasPrefix(strings.ToUpper(parts[len(parts)-1]), "HTTP/") {
		return opaque, nil // HTTP/0.9 or not HTTP: no Host to read
	}
	if strings.HasPrefix(line, "PRI * HTTP/2") {
		return opaque, nil // h2c with prior knowledge: names are HPACK-coded
	}
	if len(parts) != 3 || (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") || strings.Count(line, " ") != 2 {
		// Odd spacing, tabs or versions that servers read each their own
		// way: refused rather than guessed.
		return malformed, nil
	}
	parts[0] = strings.ToUpper(parts[0])
	var names []string
	target := parts[1]
	if k := strings.Index(target, "://"); k > 0 && parts[0] != "CONNECT" {
		rest := target[k+3:]
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			rest = rest[:j]
		}
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			rest = rest[at+1:]
		}
		h, ok := hostOf(rest)
		if !ok {
			return malformed, nil
		}
		names = append(names, h)
	} else if parts[0] == "CONNECT" {
		h, ok := hostOf(target)
		if !ok {
			return malformed, nil
		}
		names = append(names, h)
	}
	// Headers, up to the empty line.
	head := b[end+1:]
	hosts := 0
	for {
		j := bytes.IndexByte(head, '\n')
		if j < 0 {
			if total >= maxHTTPHead {
				return malformed, nil
			}
			return needMore, nil
		}
		h := strings.TrimSuffix(string(head[:j]), "\r")
		head = head[j+1:]
		if h == "" {
			break
		}
		if h[0] == ' ' || h[0] == '\t' {
			return malformed, nil // obsolete line folding
		}
		colon := strings.IndexByte(h, ':')
		if colon <= 0 || strings.ContainsAny(h[:colon], " \t") {
			return malformed, nil
		}
		if !strings.EqualFold(h[:colon], "host") {
			continue
		}
		hosts++
		if hosts > 1 {
			return malformed, nil // two Hosts: which one a server uses is anyone's guess
		}
		v, ok := hostOf(strings.TrimSpace(h[colon+1:]))
		if !ok {
			return malformed, nil
		}
		if len(names) == 0 || names[0] != v {
			names = append(names, v)
		}
	}
	return named, names
}

func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

// hostOf returns the host of an HTTP authority ("name", "name:port",
// "1.2.3.4:80", "[::1]:80"), normalised.
func hostOf(s string) (string, bool) {
	if s == "" {
		return "", false
	}
	host := s
	if h, _, err := net.SplitHostPort(s); err == nil {
		host = h
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", false
		}
		return canonical(a).String(), true
	}
	return normalName(host)
}

// normalName lower-cases a host name, drops a trailing dot, and checks it
// is made of letters, digits, '-' and '_' in non-empty labels.
func normalName(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	b := []byte(s)
	label := 0
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		case c == '.':
			if label == 0 {
				return "", false
			}
			label = -1
		default:
			return "", false
		}
		label++
		if label > 63 {
			return "", false
		}
	}
	return string(b), true
}
