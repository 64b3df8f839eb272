package sshd

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/agentkernel/agentkernel/internal/agent"
)

// TestConnectionLimit: connections that never authenticate (any local
// user can open them) are served up to maxConns at once; one more is
// closed at once, and a slot freed serves a new client its banner.
func TestConnectionLimit(t *testing.T) {
	signer := func() ssh.Signer {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ssh.NewSignerFromKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srv, err := New(Options{CA: signer().PublicKey(), HostKey: signer(), User: "sandbox",
		Dial: func() (*agent.Client, error) { return nil, errors.New("no sandbox here") }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	banner := func(c net.Conn) (string, error) {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		return bufio.NewReader(c).ReadString('\n')
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := 0; i < maxConns; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if b, err := banner(c); err != nil || !strings.HasPrefix(b, "SSH-2.0-") {
			t.Fatalf("connection %d: %q %v", i, b, err)
		}
	}
	extra, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	if b, err := banner(extra); err == nil {
		t.Fatalf("connection %d past the limit was served: %q", maxConns+1, b)
	}
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := banner(c)
		if err == nil && strings.HasPrefix(b, "SSH-2.0-") {
			held = append(held, c)
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("a freed slot served no new client")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
