package netlab

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

func addrPort(a net.Addr) netip.AddrPort {
	if a == nil {
		return netip.AddrPort{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// logListener records every connection it accepts.
type logListener struct {
	net.Listener
	lab     *Lab
	service string
}

func (ll logListener) Accept() (net.Conn, error) {
	c, err := ll.Listener.Accept()
	if err == nil {
		a := Accepted{Service: ll.service, Local: addrPort(c.LocalAddr()), Remote: addrPort(c.RemoteAddr())}
		ll.lab.record(func() { ll.lab.accepted = append(ll.lab.accepted, a) })
	}
	return c, err
}

// group runs a lab's servers and stops them all.
type group struct {
	wg    sync.WaitGroup
	mu    sync.Mutex
	stops []func()
}

func (g *group) goServe(serve func(), stop func()) {
	g.mu.Lock()
	g.stops = append(g.stops, stop)
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		serve()
	}()
}

func (g *group) stop() {
	g.mu.Lock()
	stops := g.stops
	g.stops = nil
	g.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	g.wg.Wait()
}

// serveHTTP serves h on ln (TLS with the lab's CA when tlsOn) until
// stopped.
func (l *Lab) serveHTTP(g *group, ln net.Listener, service string, h http.Handler, tlsOn bool) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	ln = logListener{Listener: ln, lab: l, service: service}
	if tlsOn {
		srv.TLSConfig = &tls.Config{GetCertificate: l.ca.getCertificate, MinVersion: tls.VersionTLS12}
	}
	g.goServe(func() {
		if tlsOn {
			_ = srv.ServeTLS(ln, "", "")
		} else {
			_ = srv.Serve(ln)
		}
	}, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	})
}

// marker writes the answer that names the server.
func (l *Lab) marker(w http.ResponseWriter, r *http.Request, role string) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	sni := ""
	if r.TLS != nil {
		sni = r.TLS.ServerName
	}
	w.Header().Set("X-Netlab-Role", role)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "netlab %s host=%s sni=%s local=%s path=%s\n", role, r.Host, sni, addrPort(local), r.URL.Path)
}

// handler is the HTTP(S) handler of every inet address: the marker,
// and on web addresses the fixtures.
func (l *Lab) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/", l.fix.servePyPI)
	mux.HandleFunc("/files/", l.fix.servePyPI)
	mux.HandleFunc("/npm/", l.fix.serveNPM)
	if l.fix.git != nil {
		mux.Handle("/git/", l.fix.git)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		lap := addrPort(local)
		rl := role(lap.Addr())
		req := Request{Role: rl, Host: r.Host, Method: r.Method, Path: r.URL.Path, Local: lap, Remote: addrPort(remoteAddr(r))}
		if r.TLS != nil {
			req.SNI = r.TLS.ServerName
		}
		l.record(func() { l.requests = append(l.requests, req) })
		if rl == RoleWeb {
			if _, pattern := mux.Handler(r); pattern != "" {
				mux.ServeHTTP(w, r)
				return
			}
		}
		l.marker(w, r, rl)
	})
}

func remoteAddr(r *http.Request) net.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}

// hostHandler answers on the client namespace's own addresses.
func (l *Lab) hostHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		req := Request{Role: RoleHost, Host: r.Host, Method: r.Method, Path: r.URL.Path, Local: addrPort(local), Remote: addrPort(remoteAddr(r))}
		l.record(func() { l.requests = append(l.requests, req) })
		l.marker(w, r, RoleHost)
	})
}

// serveEcho echoes every datagram on pc (bound to one address, so that
// each datagram's destination is known) back to its sender.
func (l *Lab) serveEcho(g *group, pc net.PacketConn) {
	local := addrPort(pc.LocalAddr())
	g.goServe(func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			d := Datagram{Local: local, Remote: addrPort(from), Payload: append([]byte(nil), buf[:n]...)}
			l.record(func() { l.datagrams = append(l.datagrams, d) })
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}, func() { _ = pc.Close() })
}

// serveStream runs one handler per accepted connection on ln.
func (l *Lab) serveStream(g *group, ln net.Listener, service string, h func(net.Conn, *Accepted)) {
	var conns sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	g.goServe(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					conns.Wait()
					return
				}
				continue
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer func() {
					mu.Lock()
					delete(open, c)
					mu.Unlock()
					_ = c.Close()
				}()
				a := Accepted{Service: service, Local: addrPort(c.LocalAddr()), Remote: addrPort(c.RemoteAddr())}
				h(c, &a)
				l.record(func() { l.accepted = append(l.accepted, a) })
			}()
		}
	}, func() {
		_ = ln.Close()
		mu.Lock()
		for c := range open {
			_ = c.Close()
		}
		mu.Unlock()
	})
}

// recorder keeps the first bytes a client sends (up to 16 KiB, or what
// came within a second), then answers with its marker and closes.
func (l *Lab) recorder(c net.Conn, a *Accepted) {
	buf := make([]byte, 16<<10)
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	n, _ := io.ReadAtLeast(c, buf, 1)
	a.First = append([]byte(nil), buf[:n]...)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "netlab recorder local=%s got=%d\n", a.Local, n)
}

// sink reads and discards everything, counting it.
func (l *Lab) sink(c net.Conn, _ *Accepted) {
	buf := make([]byte, 256<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			l.record(func() { l.sunk += int64(n) })
		}
		if err != nil {
			return
		}
	}
}

// source writes zeros until the client goes away.
func (l *Lab) source(c net.Conn, _ *Accepted) {
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}
