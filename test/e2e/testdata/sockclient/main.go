// Command sockclient sends one HTTP request over a unix socket and prints
// the answer: the tests run it as another user to show that the API's
// unix socket refuses other users.
//
//	sockclient SOCKET METHOD PATH [JSON-BODY]
//
// It prints "status N" and the body, and exits 0 when an answer came,
// 2 when the connection failed (e.g. the socket's mode forbids it).
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: sockclient SOCKET METHOD PATH [JSON-BODY]")
		os.Exit(64)
	}
	sock, method, path := os.Args[1], os.Args[2], os.Args[3]
	var body io.Reader
	if len(os.Args) > 4 {
		body = strings.NewReader(os.Args[4])
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	req, err := http.NewRequest(method, "http://agentkernel"+path, body)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(64)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status %d\n%s\n", resp.StatusCode, b)
}
