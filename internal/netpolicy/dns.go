package netpolicy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/agentkernel/agentkernel/internal/netstack"
)

// ErrNotDNS is DNS's error for input that gets no answer at all: too
// short to carry a DNS header, or a response rather than a query.
var ErrNotDNS = errors.New("not a DNS query")

// maxChain bounds the CNAME chain an answer may hold.
const maxChain = 16

// DNS answers one query that the sandbox sent to the stack's resolver.
func (e *Engine) DNS(ctx context.Context, src netip.AddrPort, query []byte) ([]byte, error) {
	e.stats.dnsQueries.Add(1)
	if len(query) < 12 {
		return nil, ErrNotDNS
	}
	if query[2]&0x80 != 0 { // QR: a response, never answered (no loops)
		return nil, ErrNotDNS
	}
	req := new(dns.Msg)
	if err := req.Unpack(query); err != nil {
		return formErr(query), nil
	}
	if req.Opcode != dns.OpcodeQuery {
		return e.pack(ctx, req, new(dns.Msg).SetRcode(req, dns.RcodeNotImplemented))
	}
	if len(req.Question) != 1 || len(req.Answer) != 0 || len(req.Ns) != 0 {
		return e.pack(ctx, req, new(dns.Msg).SetRcodeFormatError(req))
	}
	q := req.Question[0]
	name, ok := normalName(q.Name)
	if !ok {
		if q.Name == "." {
			// The root: nothing to allow or block, never forwarded.
			return e.pack(ctx, req, e.refusal(req, dns.RcodeRefused, ""))
		}
		e.deny(Denial{Kind: KindDNS, Name: strings.TrimSuffix(q.Name, "."), Reason: "not a valid host name"})
		return e.pack(ctx, req, e.refusal(req, dns.RcodeNameError, "not a valid host name"))
	}
	if q.Qclass != dns.ClassINET {
		return e.pack(ctx, req, e.refusal(req, dns.RcodeNotImplemented, ""))
	}
	switch q.Qtype {
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB:
		return e.pack(ctx, req, e.refusal(req, dns.RcodeRefused, "query type refused"))
	}
	if !e.resolvable(name) {
		d := e.nameDenial(name)
		e.deny(d)
		return e.pack(ctx, req, e.refusal(req, dns.RcodeNameError, "blocked by the sandbox's network policy: "+d.Reason))
	}

	select {
	case e.dnsFlight <- struct{}{}:
		defer func() { <-e.dnsFlight }()
	default:
		e.stats.dnsErrors.Add(1)
		return e.pack(ctx, req, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
	}
	resp, err := e.exchange(ctx, req, q)
	if err != nil {
		e.stats.dnsErrors.Add(1)
		return e.pack(ctx, req, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
	}
	e.allowed(KindDNS)
	m, _ := e.filterAnswer(req, resp, name)
	return e.pack(ctx, req, m)
}

// formErr is a FORMERR answer to a message that did not parse: its id,
// opcode and RD copied, nothing else.
func formErr(query []byte) []byte {
	out := make([]byte, 12)
	copy(out[:2], query[:2])
	out[2] = 0x80 | query[2]&0x79 // QR, opcode, RD
	out[3] = dns.RcodeFormatError
	return out
}

// refusal is an answer that the policy gives without asking upstream;
// with EDNS, an Extended DNS Error says why (RFC 8914).
func (e *Engine) refusal(req *dns.Msg, rcode int, why string) *dns.Msg {
	m := new(dns.Msg).SetRcode(req, rcode)
	m.RecursionAvailable = true
	if why != "" && req.IsEdns0() != nil {
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: why})
	}
	return m
}

// pack writes m as the answer to req, truncated to what the client can
// take over UDP (512 bytes without EDNS); over TCP (netstack.DNSOverTCP)
// to what a DNS message can hold.
func (e *Engine) pack(ctx context.Context, req, m *dns.Msg) ([]byte, error) {
	m.Id = req.Id
	m.Response = true
	size := dns.MinMsgSize
	if netstack.DNSOverTCP(ctx) {
		size = dns.MaxMsgSize
	}
	if opt := req.IsEdns0(); opt != nil {
		size = max(int(opt.UDPSize()), size)
		if m.IsEdns0() == nil {
			m.SetEdns0(uint16(min(size, 1232)), opt.Do())
		}
	} else {
		// No EDNS asked, none given.
		extra := m.Extra[:0]
		for _, rr := range m.Extra {
			if rr.Header().Rrtype != dns.TypeOPT {
				extra = append(extra, rr)
			}
		}
		m.Extra = extra
	}
	m.Truncate(min(size, dns.MaxMsgSize))
	b, err := m.Pack()
	if err != nil {
		return formErr(packHeader(req)), nil
	}
	return b, nil
}

func packHeader(req *dns.Msg) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint16(b, req.Id)
	b[2] = byte(req.Opcode) << 3 & 0x78
	if req.RecursionDesired {
		b[2] |= 1
	}
	return b
}

// exchange asks the upstream resolvers, in turn, a fresh query for q.
func (e *Engine) exchange(ctx context.Context, req *dns.Msg, q dns.Question) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(q.Name, q.Qtype)
	m.RecursionDesired = true
	m.CheckingDisabled = req.CheckingDisabled
	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	m.SetEdns0(1232, do)
	if len(e.resolvers) == 0 {
		return nil, errors.New("no upstream DNS server")
	}
	var last error
	for _, r := range e.resolvers {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		c := &dns.Client{Net: "udp", Timeout: e.dnsTimeout, UDPSize: 1232}
		resp, _, err := c.ExchangeContext(ctx, m, r.String())
		if err == nil && resp.Truncated {
			c = &dns.Client{Net: "tcp", Timeout: e.dnsTimeout}
			resp, _, err = c.ExchangeContext(ctx, m, r.String())
		}
		if err != nil {
			last = err
			continue
		}
		if resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused {
			last = fmt.Errorf("%s answered %s", r, dns.RcodeToString[resp.Rcode])
			continue
		}
		if len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, q.Name) || resp.Question[0].Qtype != q.Qtype {
			last = fmt.Errorf("%s answered another question", r)
			continue
		}
		return resp, nil
	}
	return nil, last
}

// filterAnswer turns an upstream answer into the sandbox's: records the
// policy refuses dropped, kept addresses remembered under name. The
// denial it reported, if any, comes with it: a chain to a blocked name
// (the answer is then an NXDOMAIN) or addresses dropped.
func (e *Engine) filterAnswer(req, resp *dns.Msg, name string) (*dns.Msg, *Denial) {
	m := new(dns.Msg).SetReply(req)
	m.Rcode = resp.Rcode
	m.RecursionAvailable = resp.RecursionAvailable
	m.AuthenticatedData = resp.AuthenticatedData && req.AuthenticatedData
	q := req.Question[0]

	// The chain of names the answer walks from the question's.
	chain := map[string]bool{strings.ToLower(q.Name): true}
	for range maxChain {
		grew := false
		for _, rr := range resp.Answer {
			if c, ok := rr.(*dns.CNAME); ok && chain[strings.ToLower(c.Hdr.Name)] && !chain[strings.ToLower(c.Target)] {
				chain[strings.ToLower(c.Target)] = true
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	for n := range chain {
		if nn, ok := normalName(n); ok && nn != name {
			if b := e.blockedBy(nn); b != "" {
				d := Denial{Kind: KindDNS, Name: name, Reason: fmt.Sprintf("its answer leads to %s, which matches the block list (%s)", nn, b)}
				e.deny(d)
				return e.refusal(req, dns.RcodeNameError, "blocked by the sandbox's network policy"), &d
			}
		}
	}

	now := e.now()
	dropped := []string(nil)
	for _, rr := range resp.Answer {
		h := rr.Header()
		if !chain[strings.ToLower(h.Name)] {
			continue // not about the question: a stub would ignore it, so do we
		}
		var addr netip.Addr
		switch r := rr.(type) {
		case *dns.A:
			addr, _ = netip.AddrFromSlice(r.A.To4())
		case *dns.AAAA:
			addr, _ = netip.AddrFromSlice(r.AAAA.To16())
		case *dns.SVCB:
			r.Value = withoutHints(r.Value)
		case *dns.HTTPS:
			r.Value = withoutHints(r.Value)
		}
		if addr.IsValid() {
			addr = canonical(addr)
			if why := e.refused(addr); why != "" {
				dropped = append(dropped, addr.String()+" ("+why+")")
				e.stats.dnsDropped.Add(1)
				continue
			}
			ttl := time.Duration(h.Ttl) * time.Second
			ttl = min(max(ttl, e.minTTL), DefaultMaxTTL)
			e.names.add(name, addr, now.Add(ttl))
		}
		m.Answer = append(m.Answer, rr)
	}
	var denial *Denial
	if len(dropped) > 0 {
		d := Denial{Kind: KindDNS, Name: name, Reason: "its answer points at a refused address (DNS rebinding): " + strings.Join(dropped, ", ")}
		if len(dropped) == 1 {
			if a, err := netip.ParseAddr(strings.Fields(dropped[0])[0]); err == nil {
				d.Allow = refusalHint(a, e.refused(a))
			}
		}
		e.deny(d)
		denial = &d
	}
	// The authority section's SOA tells the client how long to cache a
	// negative answer; address records elsewhere are left out.
	for _, rr := range resp.Ns {
		switch rr.(type) {
		case *dns.SOA, *dns.NS:
			m.Ns = append(m.Ns, rr)
		}
	}
	return m, denial
}

// withoutHints drops the address hints of an SVCB/HTTPS record: clients
// are to use A/AAAA, which the policy filters.
func withoutHints(kv []dns.SVCBKeyValue) []dns.SVCBKeyValue {
	out := kv[:0]
	for _, v := range kv {
		switch v.Key() {
		case dns.SVCB_IPV4HINT, dns.SVCB_IPV6HINT:
			continue
		}
		out = append(out, v)
	}
	return out
}
