package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/miekg/dns"
)

// The markers a client prints on stdout, each on a line of its own: the
// parent samples the stack's CPU time between start and end, and reads
// the result's JSON after resultMark.
const (
	startMark  = "NBSTART"
	endMark    = "NBEND"
	resultMark = "NBRESULT "
)

// Where the server mode listens, inside the server's namespace.
const (
	serverAddr  = "198.18.1.1"
	dnsAddr     = "198.18.0.53"
	connectPort = 7000
	iperfPort   = 5201
	// benchZone is the zone the DNS server answers: every name under it
	// has one A record, serverAddr.
	benchZone = "bench.test."
)

// clientMain runs inside the measured network (a namespace, or a
// sandbox where this binary is mounted):
//
//	client iperf ARGS...        iperf3 -J ARGS..., result {"bps": N}
//	client connect ADDR:PORT N  N connect+close, result a latency
//	client dns SERVER:PORT N    N A queries for fresh names, result a latency
func clientMain(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "netbench client: iperf|connect|dns ...")
		return 2
	}
	var res any
	var err error
	switch args[0] {
	case "iperf":
		res, err = clientIperf(args[1:])
	case "connect", "dns":
		if len(args) != 3 {
			err = fmt.Errorf("%s ADDR:PORT N", args[0])
			break
		}
		var n int
		n, err = strconv.Atoi(args[2])
		if err != nil || n < 1 || n > 1_000_000 {
			err = fmt.Errorf("bad count %q", args[2])
			break
		}
		if args[0] == "connect" {
			res = clientConnect(args[1], n)
		} else {
			res = clientDNS(args[1], n)
		}
	default:
		err = fmt.Errorf("unknown client mode %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netbench client:", err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Println(resultMark + string(b))
	return 0
}

func clientIperf(args []string) (any, error) {
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		bin = "/usr/bin/iperf3"
	}
	cmd := exec.Command(bin, append([]string{"-J"}, args...)...)
	cmd.Stderr = os.Stderr
	// One untimed connection first: agentkernel starts a sandbox's network
	// stack when the sandbox first uses its network, and the stack's CPU is
	// sampled from the start mark on (the start-up is measured apart).
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(serverAddr, strconv.Itoa(connectPort)), 5*time.Second); err == nil {
		_ = c.Close()
	}
	fmt.Println(startMark)
	out, runErr := cmd.Output()
	fmt.Println(endMark)
	bps, err := iperfBitsPerSecond(out)
	if err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("%v (%v)", err, runErr)
		}
		return nil, err
	}
	return map[string]float64{"bps": bps}, nil
}

// clientConnect times n TCP connect+close to addr, after a few untimed
// ones.
func clientConnect(addr string, n int) latency {
	one := func() (time.Duration, error) {
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		_ = c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT pile-up over n runs
		_ = c.Close()
		return d, nil
	}
	for i := 0; i < 20; i++ {
		_, _ = one()
	}
	return timeN(n, one)
}

// clientDNS times n A queries over UDP, each for a name not asked before.
func clientDNS(server string, n int) latency {
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	tag := strconv.FormatInt(time.Now().UnixNano()%1_000_000_007, 36)
	i := 0
	one := func() (time.Duration, error) {
		i++
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("q%d-%s.%s", i, tag, benchZone), dns.TypeA)
		start := time.Now()
		r, _, err := c.Exchange(m, server)
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			return 0, fmt.Errorf("answer %s with %d records", dns.RcodeToString[r.Rcode], len(r.Answer))
		}
		return d, nil
	}
	for w := 0; w < 10; w++ {
		_, _ = one()
	}
	return timeN(n, one)
}

func timeN(n int, one func() (time.Duration, error)) latency {
	samples := make([]time.Duration, 0, n)
	var errs int
	var first error
	fmt.Println(startMark)
	for k := 0; k < n; k++ {
		d, err := one()
		if err != nil {
			errs++
			if first == nil {
				first = err
			}
			continue
		}
		samples = append(samples, d)
	}
	fmt.Println(endMark)
	return summarize(samples, errs, first)
}

// serveMain runs in the server's namespace: a TCP listener that accepts
// and closes (connect latency) and a DNS server answering every name of
// benchZone with serverAddr. It prints "ready" once both listen and runs
// until killed.
func serveMain() int {
	ln, err := net.Listen("tcp", net.JoinHostPort(serverAddr, strconv.Itoa(connectPort)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "netbench serve:", err)
		return 1
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			_ = c.Close()
		}
	}()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(dnsAddr, "53"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "netbench serve:", err)
		return 1
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(answer)}
	fmt.Println("ready")
	if err := srv.ActivateAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, "netbench serve:", err)
		return 1
	}
	return 0
}

func answer(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) == 1 {
		q := req.Question[0]
		if !dns.IsSubDomain(benchZone, dns.CanonicalName(q.Name)) {
			m.SetRcode(req, dns.RcodeNameError)
		} else if q.Qtype == dns.TypeA && q.Qclass == dns.ClassINET {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.ParseIP(serverAddr).To4(),
			})
		}
	} else {
		m.SetRcode(req, dns.RcodeFormatError)
	}
	_ = w.WriteMsg(m)
}
