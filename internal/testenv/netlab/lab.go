// Package netlab is test support: a small "internet" on this machine, for
// tests of network egress.
//
// New makes two network namespaces, joined by a veth pair made inside
// them (nothing is added to the caller's namespace):
//
//   - "inet", the internet: the gateway 198.18.0.1 / 2001:2::1, an
//     authoritative DNS server on 198.18.0.53 / 2001:2::53 that owns every
//     name (names it does not know are NXDOMAIN), web servers on
//     198.18.1.x / 2001:2::1:x (HTTP on 80, HTTPS on 443 with the lab's
//     own CA, the fixtures below), a cloud metadata server on
//     169.254.169.254, fd00:ec2::254 and 100.100.100.200, and "private"
//     servers on 10.77.0.5, fd77::5 and 100.64.0.5;
//   - "client", where the code under test runs: 198.18.0.2/15 and
//     2001:2::2/48 with default routes through inet, a resolv.conf naming
//     the lab's DNS server (/etc/netns/NAME/resolv.conf, which `ip netns
//     exec` mounts), and a server of its own on port 80 of every local
//     address (loopback included): what a sandbox must not reach on its
//     host.
//
// Every server answers with a marker ("netlab ROLE ...", header
// X-Netlab-Role) so that a test can tell "blocked" from "absent", and
// every connection a lab server accepts, every HTTP request and every
// DNS query is logged (Accepted, Requests, Queries, UDPReceived) so that
// a test can prove that a refused connection never arrived.
//
// Fixtures on every web address, under every name that points there:
// a PyPI simple index (/simple/) with one pure-Python wheel
// (PythonPackage), an npm registry (/npm/) with one package
// (NPMPackage), and git smart HTTP (/git/lab.git, one commit) served by
// `git http-backend`. Other services on every inet address: UDP echo
// (port 7), a TCP recorder that keeps the first bytes of each connection
// (port 9000: SNI and Host tests), a TCP sink (5001) and source (5002).
//
// The lab does not filter anything: blocking is the job of the code
// under test. The lab's listeners are sockets of the namespaces (made on
// an OS thread moved into the namespace with setns), so servers run as
// goroutines of the test; cleanup (t.Cleanup) stops them and deletes
// both namespaces (the veth pair goes with them) and /etc/netns/NAME.
// New needs root and Linux: elsewhere it ends the test through
// testenv.Missing.
package netlab

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// The lab's fixed addresses (Addr parses them).
const (
	Gateway4 = "198.18.0.1"
	Gateway6 = "2001:2::1"
	Client4  = "198.18.0.2"
	Client6  = "2001:2::2"
	DNS4     = "198.18.0.53"
	DNS6     = "2001:2::53"
	// Cloud metadata: AWS, GCP, Azure (and its IPv6 address on AWS),
	// Alibaba.
	Metadata4  = "169.254.169.254"
	Metadata6  = "fd00:ec2::254"
	MetadataAl = "100.100.100.200"
	// Private addresses: RFC 1918, ULA, CGNAT.
	Private4 = "10.77.0.5"
	Private6 = "fd77::5"
	CGNAT4   = "100.64.0.5"
)

// Addr is netip.MustParseAddr: for comparisons with the logs' addresses.
func Addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// Web4 and Web6 are the n-th web server's addresses (n from 1 to 9):
// 198.18.1.n and 2001:2::1:n.
func Web4(n int) string { return fmt.Sprintf("198.18.1.%d", n) }

// Web6: see Web4.
func Web6(n int) string { return fmt.Sprintf("2001:2::1:%d", n) }

// Server roles: the word after "netlab " in every answer and the value
// of the X-Netlab-Role header.
const (
	RoleWeb      = "web"
	RoleGateway  = "gateway"
	RoleDNS      = "dns"
	RoleMetadata = "metadata"
	RolePrivate  = "private"
	// RoleHost answers on the client namespace's own addresses,
	// loopback included.
	RoleHost = "host"
)

// Service ports on every inet address.
const (
	PortHTTP     = 80
	PortHTTPS    = 443
	PortEcho     = 7 // UDP
	PortRecorder = 9000
	PortSink     = 5001
	PortSource   = 5002
)

// The fixtures.
const (
	PythonPackage = "netlab-hello"
	PythonVersion = "1.0.0"
	// PythonGreeting is netlab_hello.GREETING.
	PythonGreeting = "hello from the netlab wheel"
	NPMPackage     = "netlab-hello"
	NPMVersion     = "1.0.0"
	// NPMGreeting is require("netlab-hello").greeting.
	NPMGreeting = "hello from the netlab npm package"
	// GitFile is the one file of the git repository's one commit, and
	// GitContent its content.
	GitFile    = "README.md"
	GitContent = "hello from the netlab git repository\n"
)

// DefaultNames are the names every lab starts with (AddName adds more).
// metadata.google.internal is there because its name, not only its
// address, is what a metadata block must refuse.
func DefaultNames() map[string][]netip.Addr {
	names := map[string][]string{
		"allowed.test":             {Web4(1), Web6(1)},
		"other.test":               {Web4(2), Web6(2)},
		"blocked.test":             {Web4(3), Web6(3)},
		"sub.allowed.test":         {Web4(4), Web6(4)},
		"v4only.test":              {Web4(5)},
		"v6only.test":              {Web6(6)},
		"rebind.test":              {"127.0.0.1", "::1"},
		"meta.test":                {Metadata4, Metadata6},
		"metadata.google.internal": {Metadata4},
		"private.test":             {Private4, Private6},
		"cgnat.test":               {CGNAT4},
		"host.test":                {Client4, Client6},
	}
	m := map[string][]netip.Addr{}
	for n, as := range names {
		for _, a := range as {
			m[n] = append(m[n], Addr(a))
		}
	}
	return m
}

// Option changes how New builds a lab.
type Option func(*config)

type config struct {
	ttl uint32
}

// WithTTL sets the TTL of the DNS server's answers (default 30 s).
func WithTTL(d time.Duration) Option {
	return func(c *config) { c.ttl = uint32(d / time.Second) }
}

// Accepted is one connection a lab server accepted.
type Accepted struct {
	Service string // "http", "https", "recorder", "sink", "source", "host-http"
	Local   netip.AddrPort
	Remote  netip.AddrPort
	// First holds the first bytes the recorder got (recorder only).
	First []byte
}

// Request is one HTTP request a lab web server answered.
type Request struct {
	Role   string
	Host   string
	SNI    string // "" for plain HTTP
	Method string
	Path   string
	Local  netip.AddrPort
	Remote netip.AddrPort
}

// Query is one DNS question the lab's server answered.
type Query struct {
	Name  string // lower case, no trailing dot
	Type  string // "A", "AAAA", ...
	Rcode string // "NOERROR", "NXDOMAIN", ...
}

// Datagram is one UDP datagram the echo server got.
type Datagram struct {
	Local   netip.AddrPort
	Remote  netip.AddrPort
	Payload []byte
}

// Lab is one lab: see the package documentation.
type Lab struct {
	t                testing.TB
	inetNS, clientNS string
	dir              string // the lab's files (CA, fixtures)
	ttl              uint32
	ca               *authority
	fix              *fixtures

	mu        sync.Mutex
	names     map[string][]netip.Addr
	accepted  []Accepted
	requests  []Request
	queries   []Query
	datagrams []Datagram
	sunk      int64 // bytes the sink read
}

// InetNS is the name of the internet's namespace (`ip netns`).
func (l *Lab) InetNS() string { return l.inetNS }

// ClientNS is the name of the client namespace (`ip netns`).
func (l *Lab) ClientNS() string { return l.clientNS }

// ClientNSPath is the client namespace's file, for setns(2).
func (l *Lab) ClientNSPath() string { return "/run/netns/" + l.clientNS }

// CAFile is the PEM file of the lab's CA certificate.
func (l *Lab) CAFile() string { return l.ca.file }

// CAPEM is the lab's CA certificate in PEM.
func (l *Lab) CAPEM() []byte { return append([]byte(nil), l.ca.pem...) }

// CertPool holds the lab's CA certificate only.
func (l *Lab) CertPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(l.ca.cert)
	return p
}

// Env is what clients need to trust the lab's CA (SSL_CERT_FILE for
// OpenSSL and Go, REQUESTS_CA_BUNDLE and PIP_CERT for Python,
// NODE_EXTRA_CA_CERTS, GIT_SSL_CAINFO, CURL_CA_BUNDLE), as KEY=VALUE.
func (l *Lab) Env() []string {
	f := l.ca.file
	return []string{
		"SSL_CERT_FILE=" + f,
		"REQUESTS_CA_BUNDLE=" + f,
		"PIP_CERT=" + f,
		"NODE_EXTRA_CA_CERTS=" + f,
		"GIT_SSL_CAINFO=" + f,
		"CURL_CA_BUNDLE=" + f,
	}
}

// PyPIIndex is the URL of the lab's simple index under name host
// (a name that points at a web address), e.g. PyPIIndex("allowed.test").
func PyPIIndex(host string) string { return "https://" + host + "/simple/" }

// NPMRegistry is the URL of the lab's npm registry under name host.
func NPMRegistry(host string) string { return "https://" + host + "/npm/" }

// GitURL is the URL of the lab's git repository under name host.
func GitURL(host string) string { return "https://" + host + "/git/lab.git" }

// AddName makes the lab's DNS server answer name with addrs (A and AAAA
// records), replacing what it answered before. No addrs: the name
// exists with no address (NOERROR, empty answer). A malformed name or
// address fails the test (call it from the test's goroutine).
func (l *Lab) AddName(name string, addrs ...string) {
	var as []netip.Addr
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			l.t.Helper()
			l.t.Fatalf("netlab: AddName(%q): %v", name, err)
		}
		as = append(as, ip.Unmap())
	}
	n := canonical(name)
	if n == "" || strings.ContainsAny(n, " \t\r\n/") {
		l.t.Helper()
		l.t.Fatalf("netlab: AddName: malformed name %q", name)
	}
	l.mu.Lock()
	l.names[n] = as
	l.mu.Unlock()
}

// RemoveName makes name NXDOMAIN.
func (l *Lab) RemoveName(name string) {
	l.mu.Lock()
	delete(l.names, canonical(name))
	l.mu.Unlock()
}

// Accepted lists the connections lab servers accepted so far.
func (l *Lab) Accepted() []Accepted {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Accepted(nil), l.accepted...)
}

// Requests lists the HTTP requests lab servers answered so far.
func (l *Lab) Requests() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Request(nil), l.requests...)
}

// Queries lists the DNS questions the lab's server answered so far.
func (l *Lab) Queries() []Query {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Query(nil), l.queries...)
}

// Queried reports whether the lab's DNS server was asked about name.
func (l *Lab) Queried(name string) bool {
	n := canonical(name)
	for _, q := range l.Queries() {
		if q.Name == n {
			return true
		}
	}
	return false
}

// UDPReceived lists the datagrams the echo server got so far.
func (l *Lab) UDPReceived() []Datagram {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Datagram(nil), l.datagrams...)
}

// Sunk is how many bytes the TCP sink has read so far.
func (l *Lab) Sunk() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sunk
}

// Reached reports whether any lab server accepted a connection, or the
// echo server a datagram, on local address addr (any port).
func (l *Lab) Reached(address string) bool {
	addr := Addr(address).Unmap()
	for _, a := range l.Accepted() {
		if a.Local.Addr() == addr {
			return true
		}
	}
	for _, d := range l.UDPReceived() {
		if d.Local.Addr() == addr {
			return true
		}
	}
	return false
}

func (l *Lab) lookup(name string) ([]netip.Addr, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok := l.names[name]
	return a, ok
}

func (l *Lab) record(f func()) {
	l.mu.Lock()
	f()
	l.mu.Unlock()
}

// role is what the inet server on local address a is.
func role(a netip.Addr) string {
	switch a.Unmap().String() {
	case Gateway4, Gateway6:
		return RoleGateway
	case DNS4, DNS6:
		return RoleDNS
	case Metadata4, Metadata6, MetadataAl:
		return RoleMetadata
	case Private4, Private6, CGNAT4:
		return RolePrivate
	}
	return RoleWeb
}

// inetAddrs are the addresses inet holds besides its gateway's.
func inetAddrs() []netip.Addr {
	var as []netip.Addr
	for _, a := range []string{DNS4, DNS6, Metadata4, Metadata6, MetadataAl, Private4, Private6, CGNAT4} {
		as = append(as, Addr(a))
	}
	for n := 1; n <= 9; n++ {
		as = append(as, Addr(Web4(n)), Addr(Web6(n)))
	}
	return as
}

func canonical(name string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
}

// GitHead is the commit of the lab's git repository ("" where git is
// missing: the lab then serves no repository).
func (l *Lab) GitHead() string { return l.fix.gitHead }
