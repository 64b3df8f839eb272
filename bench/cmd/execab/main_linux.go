// Command execab times exec round trips through persistent sandboxes'
// supervisor sockets (what the HTTP API pays), alternating between the
// sandboxes run after run so that each sees the same load, and prints the
// median and p90 of each.
//
//	go run ./bench/cmd/execab -n 500 old=OLDDATA/sandboxes/a/sock new=NEWDATA/sandboxes/b/sock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
)

func main() {
	n := flag.Int("n", 300, "timed round trips per socket")
	think := flag.Duration("think", 0, "pause after every round trip")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: execab [-n N] [-think D] name=socket ... [-- command args]")
		flag.PrintDefaults()
	}
	flag.Parse()
	var names []string
	var clients []*agent.Client
	args := []string{"/bin/true"}
	for i, a := range flag.Args() {
		if a == "--" {
			args = flag.Args()[i+1:]
			break
		}
		name, sock, ok := strings.Cut(a, "=")
		if !ok {
			name, sock = a, a
		}
		c, err := agent.Dial(sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, "execab:", err)
			os.Exit(1)
		}
		defer c.Close()
		names, clients = append(names, name), append(clients, c)
	}
	if len(clients) == 0 || len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "execab:", err)
		os.Exit(1)
	}
	took := make([][]time.Duration, len(clients))
	for run := -3; run < *n; run++ { // three untimed first
		for k, c := range clients {
			t0 := time.Now()
			ws, err := c.Exec(context.Background(), agent.ExecRequest{Args: args}, devNull, devNull, devNull, nil)
			d := time.Since(t0)
			if err != nil || ws.ExitStatus() != 0 {
				fmt.Fprintf(os.Stderr, "execab: %s: %v (status %d)\n", names[k], err, ws.ExitStatus())
				os.Exit(1)
			}
			if run >= 0 {
				took[k] = append(took[k], d)
			}
			time.Sleep(*think)
		}
	}
	fmt.Println("| sandbox | median | p90 |")
	fmt.Println("|---|---|---|")
	for k := range clients {
		slices.Sort(took[k])
		fmt.Printf("| %s | %.2f ms | %.2f ms |\n", names[k], ms(took[k][len(took[k])/2]), ms(took[k][len(took[k])*9/10]))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
