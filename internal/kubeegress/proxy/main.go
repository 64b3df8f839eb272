package proxy

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/internal/kubeegress"
)

const usage = `agentkernel-full kube-egress runs a Kubernetes sandbox's egress proxy
inside its pod; the kubernetes backend puts it there (docs/kubernetes.md).

  kube-egress init  [--uid N] [--tcp-port N] [--dns-port N]
      write the pod's nftables rules (the init container, CAP_NET_ADMIN)
  kube-egress serve
      run the proxy with the settings in $AGENTKERNEL_EGRESS (the sidecar)
  kube-egress ready [--dns-port N]
      exit 0 once the proxy listens (the sidecar's startup probe)
`

// Main runs "kube-egress" with args (after the command's name).
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("kube-egress "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	r := kubeegress.DefaultRules()
	uid := fs.Uint("uid", uint(r.UID), "the proxy's user: its connections leave the pod")
	tcpPort := fs.Uint("tcp-port", uint(r.TCPPort), "the proxy's port for redirected connections")
	dnsPort := fs.Uint("dns-port", uint(r.DNSPort), "the proxy's DNS port")
	switch args[0] {
	case "init", "serve", "ready":
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "kube-egress: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *uid > 1<<32-1 || *tcpPort == 0 || *tcpPort > 65535 || *dnsPort == 0 || *dnsPort > 65535 {
		fmt.Fprintf(stderr, "kube-egress %s: bad arguments\n\n%s", args[0], usage)
		return 2
	}
	r = kubeegress.Rules{UID: uint32(*uid), TCPPort: uint16(*tcpPort), DNSPort: uint16(*dnsPort)}
	switch args[0] {
	case "init":
		if err := Install(r); err != nil {
			fmt.Fprintln(stderr, "kube-egress init:", err)
			return 1
		}
		fmt.Fprintf(stdout, "egress rules written: TCP to :%d, DNS to :%d, user %d passes\n", r.TCPPort, r.DNSPort, r.UID)
		return 0
	case "ready":
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(r.DNSPort))), time.Second)
		if err != nil {
			fmt.Fprintln(stderr, "kube-egress ready: the proxy does not listen yet:", err)
			return 1
		}
		c.Close()
		return 0
	}
	var s kubeegress.Settings
	if err := json.Unmarshal([]byte(os.Getenv(kubeegress.EnvSettings)), &s); err != nil {
		fmt.Fprintf(stderr, "kube-egress serve: $%s: %v\n", kubeegress.EnvSettings, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := Serve(ctx, s, stderr, func() {
		fmt.Fprintf(stderr, "{\"ready\":\"egress proxy on :%d (DNS :%d), mode %s\"}\n", s.TCPPort, s.DNSPort, s.Network.Mode)
	})
	if err != nil {
		fmt.Fprintln(stderr, "kube-egress serve:", err)
		return 1
	}
	return 0
}
