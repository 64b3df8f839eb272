package netstack_test

import (
	"io"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Single-stream throughput and connection set-up through the stack, from
// a client inside the sandbox's namespace to a server on the host's
// loopback (through the test handler, which splices like a policy
// handler would).
//
//	go test ./internal/netstack -run '^$' -bench . -benchtime 2s

func BenchmarkUpload(b *testing.B) {
	e := start(b)
	ln := listenHost(b, "tcp", "127.0.0.1:0")
	serve(ln, func(c net.Conn) { io.Copy(io.Discard, c) })
	c, err := e.dial("tcp", "198.18.0.1:"+strconv.Itoa(portOf(ln.Addr())))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	reportGbits(b, len(buf))
}

func BenchmarkDownload(b *testing.B) {
	e := start(b)
	ln := listenHost(b, "tcp", "127.0.0.1:0")
	serve(ln, func(c net.Conn) {
		buf := make([]byte, 1<<20)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
	c, err := e.dial("tcp", "198.18.0.1:"+strconv.Itoa(portOf(ln.Addr())))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	reportGbits(b, len(buf))
}

func reportGbits(b *testing.B, size int) {
	b.StopTimer()
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)*float64(size)*8/s/1e9, "Gbit/s")
	}
}

// BenchmarkConnect is a connection from inside the sandbox to a host
// server that answers one byte: SYN to the stack, the handler's dial on
// the host, the handshake's completion, one byte back, close.
func BenchmarkConnect(b *testing.B) {
	e := start(b)
	ln := listenHost(b, "tcp", "127.0.0.1:0")
	serve(ln, func(c net.Conn) { c.Write([]byte{1}) })
	addr := "198.18.0.1:" + strconv.Itoa(portOf(ln.Addr()))
	var lat []time.Duration
	one := make([]byte, 1)
	var err error
	e.ns.Do(func() {
		b.ResetTimer()
		for b.Loop() {
			t0 := time.Now()
			var c net.Conn
			if c, err = net.Dial("tcp", addr); err != nil {
				return
			}
			lat = append(lat, time.Since(t0))
			_, err = c.Read(one)
			c.Close()
			if err != nil {
				return
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
	}
}
