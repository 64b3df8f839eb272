package netlab

import (
	"net"

	"github.com/miekg/dns"
)

// serveDNS answers as the authority for every name: the lab's names with
// their A and AAAA records, NOERROR with no answer for another type of a
// known name, NXDOMAIN (with the root's SOA) for any other name.
func (l *Lab) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = true
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeNotImplemented)
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := canonical(q.Name)
	addrs, known := l.lookup(name)
	switch {
	case !known:
		m.SetRcode(req, dns.RcodeNameError)
		m.Authoritative = true
		m.Ns = []dns.RR{&dns.SOA{
			Hdr:     dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: l.ttl},
			Ns:      "ns.netlab.test.",
			Mbox:    "hostmaster.netlab.test.",
			Serial:  1,
			Refresh: 3600, Retry: 600, Expire: 86400, Minttl: l.ttl,
		}}
	case q.Qclass == dns.ClassINET:
		for _, a := range addrs {
			hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: l.ttl}
			switch {
			case a.Is4() && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
			case a.Is6() && (q.Qtype == dns.TypeAAAA || q.Qtype == dns.TypeANY):
				hdr.Rrtype = dns.TypeAAAA
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
			}
		}
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = max(int(o.UDPSize()), dns.MinMsgSize)
			m.SetEdns0(uint16(size), false)
		}
		m.Truncate(size) // TC set when the answer does not fit
	}
	l.record(func() {
		l.queries = append(l.queries, Query{Name: name, Type: dns.TypeToString[q.Qtype], Rcode: dns.RcodeToString[m.Rcode]})
	})
	_ = w.WriteMsg(m)
}
