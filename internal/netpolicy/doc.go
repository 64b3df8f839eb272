// Package netpolicy is the policy engine behind a sandbox's network: it
// implements netstack.Handler, so every DNS query, TCP connection and UDP
// flow that leaves a sandbox's user-space network stack is decided, and
// served, here.
//
// What it enforces, for the modes of sandbox.Network:
//
//   - Addresses refused in every egress mode unless AllowCIDRs names them:
//     cloud metadata endpoints (169.254.169.254, fd00:ec2::254,
//     100.100.100.200, 168.63.129.16, ...), link-local, loopback,
//     unspecified, multicast and broadcast, reserved ranges and the host's
//     own addresses. "filtered" also refuses the private ranges (RFC 1918,
//     ULA fc00::/7, CGNAT 100.64.0.0/10). 198.18.0.0/15 and 2001:2::/48
//     (benchmarking ranges) are ordinary routable addresses. IPv4-mapped
//     IPv6 addresses (::ffff:a.b.c.d) and NAT64 addresses (64:ff9b::/96)
//     are judged by the IPv4 address inside them. An IP literal in
//     BlockDomains refuses that address too; AllowCIDRs is the one explicit
//     override of every address rule.
//   - DNS: a name matching BlockDomains (block wins over allow), or in
//     "filtered" a name matching no AllowDomains pattern, gets NXDOMAIN at
//     once, without asking anyone. Other names are asked of the host's
//     resolvers (UDP, TCP when the answer is truncated); A and AAAA records
//     that point at a refused address are dropped from the answer (DNS
//     rebinding: an allowed name must not open a way to the metadata
//     service or the host's loopback). When nothing is left the answer is
//     an empty NOERROR (NODATA), not NXDOMAIN: the name exists, only the
//     records of this type were withheld, and a stub resolver must not
//     conclude that the name's other types are missing too. ANY and zone
//     transfers are refused; ipv4hint/ipv6hint are removed from SVCB and
//     HTTPS records so that clients connect to addresses that went through
//     the A/AAAA filter. Every address an answer kept is remembered with the
//     name the sandbox asked for (a CNAME chain's end counts for the name
//     asked), for the answer's TTL but at least MinTTL, in a table of
//     bounded size (a sandbox that floods it evicts its own oldest entries).
//   - TCP: the destination's address class is checked first; in
//     "filtered" the address must come from an allowed name in that table
//     (or from AllowCIDRs). The upstream connection is dialled before the
//     sandbox's SYN is answered, so a refused or failing destination is a
//     RST inside, never a hang. The client's first bytes are inspected
//     before they go upstream: the SNI of a TLS ClientHello or the Host of
//     an HTTP/1 request must, in "filtered", be a name that resolved to
//     this address, and must never match BlockDomains. A connection that
//     presents no name (TLS without SNI, SSH, databases) is judged by its
//     address alone. Only the first request of a connection is inspected:
//     what a server does with later requests or with names inside TLS is
//     beyond what a forwarder can see (domain fronting stays possible on a
//     shared front end of an allowed name). The server's bytes flow to the
//     client from the start, so protocols where the server speaks first
//     are not delayed.
//   - UDP other than DNS to the stack's resolver: only AllowUDP's
//     "HOST:PORT" and "CIDR:PORT" destinations.
//
// Proxy mode. Where the sandbox cannot have a TUN device (rootless, on a
// host whose /dev/net/tun only root may open), the engine serves an HTTP
// proxy instead (ServeProxy) on a listener inside the sandbox's network
// namespace, and the sandbox's programs are pointed at it by
// HTTP_PROXY, HTTPS_PROXY and ALL_PROXY (NO_PROXY keeps loopback
// direct). The policy is the same: a CONNECT host:port or an absolute
// http:// URL is decided by its name (refused or blocked names, as for
// DNS), the name is resolved through the same upstream resolvers with
// the same rebinding filter and remembered in the same table, and the
// address dialled must pass the same address rules (an IP literal is
// judged as a TCP connection to it). A tunnel's first bytes are
// inspected as a TCP connection's, except that the SNI or Host inside
// must be the very name the tunnel was asked for. Plain HTTP is
// forwarded one request per connection (Connection: close both ways),
// without hop-by-hop headers and Proxy-Authorization; the Host header
// must agree with the URL. A refusal is a 403 whose one-line body names
// what was refused and the flag that would allow it; a destination that
// cannot be reached is a 502, a malformed request a 400, a request head
// not complete within 10 seconds a 408. Its limits: only programs that
// honour the proxy variables get out (others get no network at all,
// which is safe but not transparent); there is no DNS inside the
// sandbox, so a program that resolves names before it connects fails
// unless it leaves resolution to the proxy; and there is no UDP.
//
// Upstream connections go through the host's HTTP proxy when
// HTTPS_PROXY/HTTP_PROXY/ALL_PROXY say so (NO_PROXY honoured), by CONNECT to
// the allowed name rather than its address when the engine knows it, so a
// corporate proxy sees and applies its own name rules.
//
// Every refusal is counted (Stats, for /metrics) and kept, deduplicated
// and bounded, for Summary: the one line `run` prints, naming what was
// blocked and the flag that would allow it. The first refusal of each
// distinct target also goes to Options.OnDeny (the audit log), so that a
// sandbox repeating a refused request cannot flood it.
//
// The proxy chaining trades one check for another: a proxy that is given
// a name resolves it itself, so the address it reaches is the proxy's
// answer, not the one the engine checked (the proxy's own rules and
// network apply there).
//
// Secret injection (Options.Inject). A TLS connection whose ClientHello
// names a bound host, on the binding's port, is served by the engine
// itself once the policy allowed it as any other (a binding never widens
// the policy): TLS with a certificate for that one name minted from the
// sandbox's CA (NewCA: ECDSA P-256, path length 0, optionally name
// constrained to the bound hosts; leaves valid 24 hours, cached), HTTP/1.1
// or HTTP/2 as the client offers, and each request passed on over a new
// TLS connection to the address the sandbox connected to, verified
// against Injection.Roots (the system roots by default) for the bound
// name, never skipped: an upstream certificate that is refused is a 502
// and a refusal. The request goes out with the bound host as its Host
// and the secret in its header (Authorization: Bearer by default),
// replacing what the client put there; a request naming another host on
// that connection is a 421 (a shared front end could route it, with the
// secret, elsewhere), one carrying the placeholder anywhere else (in
// another header, Basic credentials included, or in the URL) a 403. Answers stream through
// unbuffered (server-sent events); the secrets are masked in their
// headers, bodies and trailers (byte for byte, so lengths and framing
// stay; the upstream is asked for gzip, which the injector decodes, and
// an encoding it did not ask for is refused), so that an upstream that
// echoes a request cannot hand the sandbox its secret. Not intercepted:
// other hosts (their TLS stays end-to-end), a connection whose server
// spoke first, TLS without SNI, HTTP/3. A plain HTTP request (first
// request of a connection, or the proxy's absolute-form requests) that
// carries the placeholder is refused, whatever its host. Limits: the
// bodies of requests are not searched for the placeholder, upgraded
// connections (WebSocket) are passed on without masking, and client
// certificates cannot be presented to a bound host. Injections are
// counted (Stats.Injected) and reported by name through OnInject, the
// injector's refusals counted apart (Stats.SecretRefused, kind
// KindSecret); no value appears in a log, error, refusal or counter.
//
// DNS messages are read and written with github.com/miekg/dns: a resolver
// that parses hostile input must get name compression, EDNS, truncation and
// every record type right, and miekg/dns is the parser that CoreDNS and
// many resolvers have hardened for years. The TLS ClientHello and HTTP
// request parsers that judge every connection are small and written
// here; crypto/tls and net/http serve only the connections the secret
// injector terminates.
package netpolicy
