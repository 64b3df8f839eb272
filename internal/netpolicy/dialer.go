package netpolicy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/netstack"
)

// HostDialer dials from the host, through the host's HTTP proxy where its
// environment names one: HTTPS_PROXY for every port but 80, HTTP_PROXY for
// port 80, ALL_PROXY where the other is unset (each also in lower case,
// which wins, as curl and Python read them), except for destinations
// NO_PROXY names. A proxied connection is an HTTP CONNECT tunnel to
// NAME:PORT when the name is known, ADDR:PORT otherwise.
type HostDialer struct {
	// Direct makes the connections to the proxy, and the direct ones of
	// a HostDialer not made by NewHostDialer; NewHostDialer's make those
	// with netstack.DialHost (the same socket options, with Direct's
	// keep-alive idle time, in fewer system calls).
	Direct    net.Dialer
	rawDirect bool

	https, http *url.URL // nil: direct
	noProxy     []noProxyRule
	noProxyAll  bool
}

type noProxyRule struct {
	prefix  netip.Prefix // valid for an address or CIDR entry
	domain  string       // lower case, without leading "." or "*."
	subOnly bool         // ".example.com" and "*.example.com" match subdomains only
	port    uint16       // 0: any
}

// NewHostDialer reads the proxy settings through getenv (nil:
// os.Getenv). A proxy URL it cannot use is an error: connections must not
// silently bypass a proxy the host requires.
func NewHostDialer(getenv func(string) string) (*HostDialer, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	env := func(name string) (string, string) {
		for _, n := range []string{strings.ToLower(name), name} {
			if v := strings.TrimSpace(getenv(n)); v != "" {
				return n, v
			}
		}
		return "", ""
	}
	// Keep-alive probes after 30 s of silence, at the kernel's interval
	// and count: two socket options per connection rather than four.
	d := &HostDialer{Direct: net.Dialer{KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: 30 * time.Second, Interval: -1, Count: -1,
	}}, rawDirect: true}
	if n, v := env("ALL_PROXY"); v != "" {
		u, err := parseProxyURL(n, v)
		if err != nil {
			return nil, err
		}
		d.https, d.http = u, u
	}
	if n, v := env("HTTPS_PROXY"); v != "" {
		u, err := parseProxyURL(n, v)
		if err != nil {
			return nil, err
		}
		d.https = u
	}
	if n, v := env("HTTP_PROXY"); v != "" {
		u, err := parseProxyURL(n, v)
		if err != nil {
			return nil, err
		}
		d.http = u
	}
	_, np := env("NO_PROXY")
	for _, f := range strings.FieldsFunc(np, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		f = strings.ToLower(f)
		if f == "*" {
			d.noProxyAll = true
			continue
		}
		r := noProxyRule{}
		if p, err := netip.ParsePrefix(f); err == nil {
			r.prefix = p.Masked()
			d.noProxy = append(d.noProxy, r)
			continue
		}
		host := f
		if h, port, err := net.SplitHostPort(f); err == nil {
			if n, err := strconv.ParseUint(port, 10, 16); err == nil {
				host, r.port = h, uint16(n)
			}
		}
		host = strings.Trim(host, "[]")
		if a, err := netip.ParseAddr(host); err == nil {
			r.prefix = netip.PrefixFrom(canonical(a), canonical(a).BitLen())
			d.noProxy = append(d.noProxy, r)
			continue
		}
		switch {
		case strings.HasPrefix(host, "*."):
			host, r.subOnly = host[2:], true
		case strings.HasPrefix(host, "."):
			host, r.subOnly = host[1:], true
		}
		r.domain = strings.TrimSuffix(host, ".")
		if r.domain != "" {
			d.noProxy = append(d.noProxy, r)
		}
	}
	return d, nil
}

func parseProxyURL(env, v string) (*url.URL, error) {
	raw := v
	if !strings.Contains(v, "://") {
		raw = "http://" + v
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%s=%q is not a proxy URL (http://[user:password@]host:port)", env, redact(v))
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%s: proxy scheme %q is not supported (only http:// proxies, which are asked to CONNECT)", env, u.Scheme)
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "80")
	}
	return u, nil
}

// redact hides a password in a proxy setting for error messages.
func redact(v string) string {
	if at := strings.LastIndex(v, "@"); at >= 0 {
		if s := strings.Index(v, "://"); s >= 0 && s < at {
			return v[:s+3] + "***@" + v[at+1:]
		}
		return "***@" + v[at+1:]
	}
	return v
}

// Proxy returns the proxy a connection to name (may be "") at addr goes
// through, nil for a direct connection.
func (d *HostDialer) Proxy(name string, addr netip.AddrPort) *url.URL {
	u := d.https
	if addr.Port() == 80 {
		u = d.http
	}
	if u == nil || d.noProxyAll {
		return nil
	}
	a := canonical(addr.Addr())
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, r := range d.noProxy {
		if r.port != 0 && r.port != addr.Port() {
			continue
		}
		if r.prefix.IsValid() {
			if r.prefix.Contains(a) {
				return nil
			}
			continue
		}
		if name == "" {
			continue
		}
		if name == r.domain && !r.subOnly || strings.HasSuffix(name, "."+r.domain) {
			return nil
		}
	}
	return u
}

// DialTCP connects to addr, through the proxy if one applies.
func (d *HostDialer) DialTCP(ctx context.Context, name string, addr netip.AddrPort) (net.Conn, error) {
	p := d.Proxy(name, addr)
	if p == nil {
		if d.rawDirect {
			return netstack.DialHost(ctx, addr, d.Direct.KeepAliveConfig.Idle)
		}
		return d.Direct.DialContext(ctx, "tcp", addr.String())
	}
	target := netip.AddrPortFrom(canonical(addr.Addr()), addr.Port()).String()
	if name != "" {
		target = net.JoinHostPort(name, strconv.Itoa(int(addr.Port())))
	}
	return connectVia(ctx, &d.Direct, p, target)
}

// maxProxyReply bounds a proxy's answer to CONNECT.
const maxProxyReply = 16 << 10

// connectVia opens a tunnel to target through the HTTP proxy u.
func connectVia(ctx context.Context, dialer *net.Dialer, u *url.URL, target string) (net.Conn, error) {
	c, err := dialer.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", u.Host, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var req strings.Builder
	fmt.Fprintf(&req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n", target, target)
	if u.User != nil {
		pw, _ := u.User.Password()
		cred := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pw))
		fmt.Fprintf(&req, "Proxy-Authorization: Basic %s\r\n", cred)
	}
	req.WriteString("\r\n")
	if _, err := c.Write([]byte(req.String())); err != nil {
		c.Close()
		return nil, fmt.Errorf("proxy %s: %w", u.Host, err)
	}
	br := bufio.NewReaderSize(c, 4096)
	status, err := readProxyReply(br)
	if err != nil {
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("proxy %s: %w", u.Host, err)
	}
	if len(status) < 12 || !strings.HasPrefix(status, "HTTP/1.") || status[9] != '2' {
		c.Close()
		return nil, fmt.Errorf("proxy %s refused CONNECT %s: %s", u.Host, target, status)
	}
	c.SetDeadline(time.Time{})
	tc := &tunnelConn{Conn: c}
	if n := br.Buffered(); n > 0 {
		tc.pending, _ = br.Peek(n)
		tc.pending = append([]byte(nil), tc.pending...)
	}
	return tc, nil
}

// readProxyReply reads the status line and headers of a CONNECT reply and
// returns the status line.
func readProxyReply(br *bufio.Reader) (string, error) {
	status, total := "", 0
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		if total > maxProxyReply || errors.Is(err, bufio.ErrBufferFull) {
			return "", errors.New("reply to CONNECT too long")
		}
		if err != nil {
			return "", fmt.Errorf("reading the reply to CONNECT: %w", err)
		}
		l := strings.TrimRight(string(line), "\r\n")
		if status == "" {
			if l == "" {
				return "", errors.New("empty reply to CONNECT")
			}
			status = l
			continue
		}
		if l == "" {
			return status, nil
		}
	}
}

// tunnelConn is a connection through a proxy: bytes the proxy sent after
// its reply first, and half-close passed on.
type tunnelConn struct {
	net.Conn
	pending []byte
}

func (c *tunnelConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *tunnelConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
