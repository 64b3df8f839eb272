// Command netbench measures a sandbox's network path against the
// alternatives, in one run, on this machine only: the host itself (a
// client namespace talking to a server namespace over a veth pair),
// slirp4netns, pasta and agentkernel's user-space stack (`agentkernel
// run --image host --network full`, with agentkernel itself in the
// client namespace). For each it measures single-stream TCP throughput
// both ways (iperf3, the server in the server namespace), TCP connection
// set-up latency (connect+close from inside, p50 and p99), DNS answer
// latency (from inside to the stack's resolver or the server
// namespace's DNS server), and the CPU time the stack's process used
// over those (slirp4netns's, pasta's, agentkernel's network helper's);
// then the extra start-up cost of `run` with the network on, and prints
// the goals with met / not met.
//
//	CGO_ENABLED=0 go build -o /tmp/netbench ./bench/cmd/netbench && /tmp/netbench -agentkernel $PWD/bin/agentkernel
//
// It needs root, iproute2 and iperf3; slirp4netns and pasta (package
// passt) are measured when installed. The namespaces it makes are named
// nb-*-PID and deleted at the end, with /etc/netns/nb-cli-PID.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentkernel/agentkernel/bench/harness"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "client":
			os.Exit(clientMain(os.Args[2:]))
		case "serve":
			os.Exit(serveMain())
		}
	}
	o := options{}
	flag.StringVar(&o.ak, "agentkernel", "", "path of a built agentkernel binary (agentkernel-full beside it); without it the agentkernel case is left out")
	flag.DurationVar(&o.iperfTime, "t", 5*time.Second, "length of each iperf3 run")
	flag.IntVar(&o.nConnect, "connects", 2000, "timed connections per case")
	flag.IntVar(&o.nDNS, "queries", 500, "timed DNS queries per case")
	flag.IntVar(&o.nStart, "n", 100, "timed runs per network mode of the start-up measurement (run /bin/true)")
	flag.StringVar(&o.only, "cases", "host,slirp4netns,pasta,agentkernel", "comma-separated cases to measure")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "netbench: needs root (it makes network namespaces)")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "netbench:", err)
		os.Exit(1)
	}
}

type options struct {
	ak                     string
	iperfTime              time.Duration
	nConnect, nDNS, nStart int
	only                   string
}

// result is one case's figures; a zero figure with err set failed.
type result struct {
	name           string
	up, down       float64 // bits/s
	upCPU, downCPU float64 // cores
	connect        latency
	connCPU        time.Duration // per connection
	dns            latency
	errs           []string
	stackCPU       bool // whether a stack process's CPU was measured
}

func (r *result) fail(what string, err error) {
	r.errs = append(r.errs, what+": "+oneLine(err))
}

// lab is the namespaces and processes of one run.
type lab struct {
	self     string // this binary
	srv, cli string // namespace names
	work     string
	mu       sync.Mutex
	undo     []func()
}

func (l *lab) atExit(f func()) {
	l.mu.Lock()
	l.undo = append(l.undo, f)
	l.mu.Unlock()
}

func (l *lab) close() {
	l.mu.Lock()
	undo := l.undo
	l.undo = nil
	l.mu.Unlock()
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i]()
	}
}

func sh(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// addNS makes namespace name with loopback up, and deletes it at exit.
func (l *lab) addNS(name string) error {
	if err := sh("ip", "netns", "add", name); err != nil {
		return err
	}
	l.atExit(func() { _ = sh("ip", "netns", "del", name) })
	return sh("ip", "-n", name, "link", "set", "lo", "up")
}

// start starts argv and ends it (SIGKILL to that process) at exit. When
// ready is not "", it waits for that line on the process's stdout.
func (l *lab) start(ready string, argv ...string) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var out io.Reader
	if ready != "" {
		p, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		out = p
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l.atExit(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if ready == "" {
		return cmd, nil
	}
	got := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == ready {
				got <- true
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		got <- false
	}()
	select {
	case ok := <-got:
		if ok {
			return cmd, nil
		}
	case <-time.After(10 * time.Second):
	}
	return nil, fmt.Errorf("%s did not start: %s", strings.Join(argv, " "), bytes.TrimSpace(stderr.Bytes()))
}

// setup builds the server namespace (gateway 198.18.0.1/24 on a veth,
// serverAddr and dnsAddr on its loopback, iperf3 -s, this binary's
// serve mode) and the client namespace (198.18.0.2/24, default route
// through the server namespace, a resolv.conf naming dnsAddr).
func (l *lab) setup() error {
	if err := l.addNS(l.srv); err != nil {
		return err
	}
	if err := l.addNS(l.cli); err != nil {
		return err
	}
	etc := filepath.Join("/etc/netns", l.cli)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	l.atExit(func() { _ = os.RemoveAll(etc) })
	if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte("nameserver "+dnsAddr+"\n"), 0o644); err != nil {
		return err
	}
	for _, c := range [][]string{
		{"ip", "-n", l.srv, "link", "add", "nbs", "type", "veth", "peer", "name", "nbc", "netns", l.cli},
		{"ip", "-n", l.srv, "addr", "add", "198.18.0.1/24", "dev", "nbs"},
		{"ip", "-n", l.srv, "addr", "add", serverAddr + "/32", "dev", "lo"},
		{"ip", "-n", l.srv, "addr", "add", dnsAddr + "/32", "dev", "lo"},
		{"ip", "-n", l.srv, "link", "set", "nbs", "up"},
		{"ip", "-n", l.cli, "addr", "add", "198.18.0.2/24", "dev", "nbc"},
		{"ip", "-n", l.cli, "link", "set", "nbc", "up"},
		{"ip", "-n", l.cli, "route", "add", "default", "via", "198.18.0.1"},
	} {
		if err := sh(c...); err != nil {
			return err
		}
	}
	if _, err := l.start("ready", "ip", "netns", "exec", l.srv, l.self, "serve"); err != nil {
		return err
	}
	if _, err := l.start("", "ip", "netns", "exec", l.srv, "iperf3", "-s", "-B", serverAddr, "-p", strconv.Itoa(iperfPort)); err != nil {
		return err
	}
	// The client namespace reaches the server (and iperf3 listens) before
	// any case starts.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := sh("ip", "netns", "exec", l.cli, l.self, "client", "connect", fmt.Sprintf("%s:%d", serverAddr, iperfPort), "1")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// measured runs one client command and returns its result's JSON and the
// CPU time the stack's process used between the client's start and end
// marks, as cores (CPU time / wall time) and in total. stack finds that
// process once the command runs (nil: none).
func measured(argv []string, stack func(cmd *exec.Cmd) (int, error)) (res []byte, cores float64, cpu time.Duration, err error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, 0, 0, err
	}
	if err := cmd.Start(); err != nil {
		return nil, 0, 0, err
	}
	var pid int
	var c0 time.Duration
	var w0 time.Time
	var stackErr error
	s := bufio.NewScanner(out)
	s.Buffer(make([]byte, 64<<10), 4<<20)
	var other []string
	for s.Scan() {
		line := s.Text()
		switch {
		case line == startMark && stack != nil:
			if pid, stackErr = stack(cmd); stackErr == nil {
				c0, stackErr = processCPU("/proc", pid)
			}
			w0 = time.Now()
		case line == endMark && stack != nil && stackErr == nil:
			var c1 time.Duration
			c1, stackErr = processCPU("/proc", pid)
			wall := time.Since(w0)
			cpu = c1 - c0
			cores = cpu.Seconds() / wall.Seconds()
		case strings.HasPrefix(line, resultMark):
			res = []byte(strings.TrimPrefix(line, resultMark))
		default:
			if len(other) < 20 {
				other = append(other, line)
			}
		}
	}
	werr := cmd.Wait()
	if res == nil {
		msg := strings.TrimSpace(stderr.String() + "\n" + strings.Join(other, "\n"))
		if werr == nil {
			werr = errors.New("no result")
		}
		return nil, 0, 0, fmt.Errorf("%v: %s", werr, msg)
	}
	if stackErr != nil {
		return res, 0, 0, fmt.Errorf("stack CPU: %w", stackErr)
	}
	return res, cores, cpu, nil
}

// path is how a case runs a client: prefix is the command line that
// puts "netbench client ..." inside the measured network, client is the
// path of this binary there, dns the resolver the inside uses, and
// stack finds the stack's process.
type path struct {
	name   string
	prefix func() []string
	client string
	dns    string
	stack  func(*exec.Cmd) (int, error)
}

func (l *lab) measure(p path, o options) result {
	r := result{name: p.name, stackCPU: p.stack != nil}
	secs := strconv.Itoa(int(o.iperfTime.Round(time.Second) / time.Second))
	iperf := func(reverse bool) (float64, float64, error) {
		argv := append(p.prefix(), p.client, "client", "iperf", "-c", serverAddr, "-p", strconv.Itoa(iperfPort), "-t", secs)
		if reverse {
			argv = append(argv, "-R")
		}
		res, cores, _, err := measured(argv, p.stack)
		if res == nil {
			return 0, 0, err
		}
		var v struct{ BPS float64 }
		if jerr := json.Unmarshal(res, &v); jerr != nil {
			return 0, 0, jerr
		}
		return v.BPS, cores, err
	}
	var err error
	if r.up, r.upCPU, err = iperf(false); err != nil {
		r.fail("upload", err)
	}
	if r.down, r.downCPU, err = iperf(true); err != nil {
		r.fail("download", err)
	}
	res, _, cpu, err := measured(append(p.prefix(), p.client, "client", "connect", fmt.Sprintf("%s:%d", serverAddr, connectPort), strconv.Itoa(o.nConnect)), p.stack)
	if res != nil {
		if jerr := json.Unmarshal(res, &r.connect); jerr != nil {
			err = jerr
		} else if r.connect.N > 0 {
			r.connCPU = cpu / time.Duration(r.connect.N)
		}
	}
	if err != nil {
		r.fail("connect", err)
	}
	if r.connect.Errors > 0 {
		r.fail("connect", fmt.Errorf("%d of %d failed, first: %s", r.connect.Errors, o.nConnect, r.connect.FirstErr))
	}
	res, _, _, err = measured(append(p.prefix(), p.client, "client", "dns", p.dns+":53", strconv.Itoa(o.nDNS)), p.stack)
	if res != nil {
		if jerr := json.Unmarshal(res, &r.dns); jerr != nil {
			err = jerr
		}
	}
	if err != nil {
		r.fail("dns", err)
	}
	if r.dns.Errors > 0 {
		r.fail("dns", fmt.Errorf("%d of %d failed, first: %s", r.dns.Errors, o.nDNS, r.dns.FirstErr))
	}
	return r
}

// pidOf is a stack function for a process the lab started itself.
func pidOf(cmd *exec.Cmd) func(*exec.Cmd) (int, error) {
	return func(*exec.Cmd) (int, error) { return cmd.Process.Pid, nil }
}

// helperOf finds agentkernel's network helper (argv[0]
// agentkernel-netstack) among the descendants of the command.
func helperOf(cmd *exec.Cmd) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := map[int]int{}
	var helpers []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		parent[pid] = pp
		argv, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		a0, _, _ := bytes.Cut(argv, []byte{0})
		if filepath.Base(string(a0)) == "agentkernel-netstack" {
			helpers = append(helpers, pid)
		}
	}
	for _, h := range helpers {
		for p, n := parent[h], 0; p > 1 && n < 64; p, n = parent[p], n+1 {
			if p == cmd.Process.Pid {
				return h, nil
			}
		}
	}
	return 0, errors.New("no agentkernel-netstack process under the run")
}

// sandboxNS makes a namespace for slirp4netns or pasta to serve.
func (l *lab) sandboxNS(kind string) (string, error) {
	ns := fmt.Sprintf("nb-%s-%d", kind, os.Getpid())
	return ns, l.addNS(ns)
}

// waitRoute waits until namespace ns has a default route (slirp4netns
// and pasta configure it once they run).
func waitRoute(ns string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", ns, "route", "show", "default").Output()
		if err == nil && len(bytes.TrimSpace(out)) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s got no default route", ns)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *lab) slirp() (path, error) {
	bin, err := exec.LookPath("slirp4netns")
	if err != nil {
		return path{}, errors.New("not installed (apt-get install -y slirp4netns)")
	}
	ns, err := l.sandboxNS("slirp")
	if err != nil {
		return path{}, err
	}
	// In the client namespace (its resolv.conf: slirp4netns's DNS
	// forwarder asks dnsAddr), serving ns through tap0.
	cmd, err := l.start("", "ip", "netns", "exec", l.cli, bin, "--configure", "--mtu=65520", "--disable-host-loopback",
		"--netns-type=path", "/run/netns/"+ns, "tap0")
	if err != nil {
		return path{}, err
	}
	if err := waitRoute(ns); err != nil {
		return path{}, err
	}
	return path{name: "slirp4netns", prefix: func() []string { return []string{"ip", "netns", "exec", ns} },
		client: l.self, dns: "10.0.2.3", stack: pidOf(cmd)}, nil
}

func (l *lab) pasta() (path, error) {
	bin, err := exec.LookPath("pasta")
	if err != nil {
		return path{}, errors.New("not installed (apt-get install -y passt)")
	}
	ns, err := l.sandboxNS("pasta")
	if err != nil {
		return path{}, err
	}
	// pasta copies the client namespace's address and default route into
	// ns; no port forwarding either way. DNS from inside goes to the
	// client namespace's resolver address through pasta's UDP path.
	cmd, err := l.start("", "ip", "netns", "exec", l.cli, bin, "--config-net", "--foreground", "--quiet",
		// As root, pasta drops to nobody before it joins ns, and then
		// cannot: stay root. IPv4 only, like the other cases.
		"--runas", "0", "-4",
		"--no-map-gw", "-t", "none", "-u", "none", "-T", "none", "-U", "none", "--netns", "/run/netns/"+ns)
	if err != nil {
		return path{}, err
	}
	if err := waitRoute(ns); err != nil {
		return path{}, err
	}
	return path{name: "pasta", prefix: func() []string { return []string{"ip", "netns", "exec", ns} },
		client: l.self, dns: dnsAddr, stack: pidOf(cmd)}, nil
}

// agentkernel runs each client as `agentkernel run --network full` in
// the client namespace, with this binary mounted at /netbench.
func (l *lab) agentkernel(ak string) (path, error) {
	if _, err := os.Stat(filepath.Join(filepath.Dir(ak), "agentkernel-full")); err != nil {
		return path{}, fmt.Errorf("no agentkernel-full beside %s", ak)
	}
	dir := filepath.Join(l.work, "mnt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return path{}, err
	}
	b, err := os.ReadFile(l.self)
	if err != nil {
		return path{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "netbench"), b, 0o755); err != nil {
		return path{}, err
	}
	data := filepath.Join(l.work, "akdata")
	return path{name: "agentkernel", prefix: func() []string {
		// Not "ip netns exec", whose /sys of its own lacks the cgroup
		// hierarchies a run needs: the namespace entered with nsenter, in
		// a mount namespace where its resolv.conf is /etc/resolv.conf.
		return []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$0" /etc/resolv.conf && ns=$1 && shift && exec nsenter --net="$ns" "$@"`,
			filepath.Join("/etc/netns", l.cli, "resolv.conf"), "/run/netns/" + l.cli,
			ak, "--data-dir", data, "run", "--no-daemon", "--image", "host",
			"--network", "full", "-v", dir + ":/netbench:ro", "--"}
	}, client: "/netbench/netbench", dns: "10.0.2.3", stack: helperOf}, nil
}

func run(o options) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, t := range []string{"ip", "iperf3"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%s not installed (apt-get install -y iproute2 iperf3)", t)
		}
	}
	if o.ak != "" {
		if o.ak, err = filepath.Abs(o.ak); err != nil {
			return err
		}
		// Every command runs in agentkernel's directory, which is then
		// the sandboxes' workspace: agentkernel looks for agentkernel-full
		// from inside the sandbox's mount namespace, where a directory
		// that is neither the workspace nor the host image's (/tmp, for
		// one) is not what it is outside.
		if err := os.Chdir(filepath.Dir(o.ak)); err != nil {
			return err
		}
	}
	work, err := os.MkdirTemp("", "netbench-")
	if err != nil {
		return err
	}
	pid := os.Getpid()
	l := &lab{self: self, srv: fmt.Sprintf("nb-srv-%d", pid), cli: fmt.Sprintf("nb-cli-%d", pid), work: work}
	l.atExit(func() { _ = os.RemoveAll(work) })
	defer l.close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		l.close()
		os.Exit(130)
	}()
	if err := l.setup(); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, c := range strings.Split(o.only, ",") {
		want[strings.TrimSpace(c)] = true
	}
	fmt.Printf("netbench %s: %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), machine())
	var results []result
	add := func(name string, p path, err error) {
		if !want[name] {
			return
		}
		if err != nil {
			results = append(results, result{name: name, errs: []string{oneLine(err)}})
			return
		}
		fmt.Fprintf(os.Stderr, "measuring %s...\n", name)
		results = append(results, l.measure(p, o))
	}
	add("host", path{name: "host", prefix: func() []string { return []string{"ip", "netns", "exec", l.cli} }, client: self, dns: dnsAddr}, nil)
	if want["slirp4netns"] {
		p, err := l.slirp()
		add("slirp4netns", p, err)
	}
	if want["pasta"] {
		p, err := l.pasta()
		add("pasta", p, err)
	}
	var startup []harness.Stats
	if want["agentkernel"] {
		if o.ak == "" {
			add("agentkernel", path{}, errors.New("no -agentkernel given"))
		} else {
			p, err := l.agentkernel(o.ak)
			add("agentkernel", p, err)
			fmt.Fprintln(os.Stderr, "timing run start-up...")
			startup = l.startup(o)
		}
	}
	report(os.Stdout, results, startup, o)
	fmt.Printf("\nafter: %s\n", loadavg())
	return nil
}

// startup times `run /bin/true` with --network none and full, interleaved,
// agentkernel in the client namespace (nsenter --net: the host's
// mounts, cgroups included, as a real run has them).
func (l *lab) startup(o options) []harness.Stats {
	data := filepath.Join(l.work, "akdata-start")
	argv := func(mode string) []string {
		return []string{"nsenter", "--net=/run/netns/" + l.cli, o.ak, "--data-dir", data, "run", "--no-daemon",
			"--image", "host", "--network", mode, "--", "/bin/true"}
	}
	cases := []harness.Case{
		{Name: "run --network none", Argv: argv("none"), Settle: 2 * time.Millisecond},
		{Name: "run --network full", Argv: argv("full"), Settle: 2 * time.Millisecond},
	}
	return harness.Run(context.Background(), cases, harness.Options{Runs: o.nStart, Warmup: 5, Interleave: true})
}

func machine() string {
	var parts []string
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "kernel "+strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n := bytes.Count(b, []byte("\nprocessor"))
		if bytes.HasPrefix(b, []byte("processor")) {
			n++
		}
		parts = append(parts, fmt.Sprintf("%d CPUs", n))
	}
	parts = append(parts, loadavg())
	return strings.Join(parts, ", ")
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load average unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// The goals for agentkernel.
const (
	goalGbits      = 10.0
	goalCores      = 1.0
	goalConnectP50 = 150 * time.Microsecond
	goalConnectP99 = 400 * time.Microsecond
	goalConnCPU    = 150 * time.Microsecond
	goalStartup    = time.Millisecond
)

func report(w io.Writer, rs []result, startup []harness.Stats, o options) {
	fmt.Fprintf(w, "iperf3 -t %d single stream, %d connects, %d DNS queries per case\n\n", int(o.iperfTime/time.Second), o.nConnect, o.nDNS)
	fmt.Fprint(w, "| |")
	for _, r := range rs {
		fmt.Fprintf(w, " %s |", r.name)
	}
	fmt.Fprint(w, " goal (agentkernel) |\n|---|")
	for range rs {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w, "---|")
	row := func(label, goal string, cell func(r result) string) {
		fmt.Fprintf(w, "| %s |", label)
		for _, r := range rs {
			fmt.Fprintf(w, " %s |", cell(r))
		}
		fmt.Fprintf(w, " %s |\n", goal)
	}
	gbits := func(v float64) string {
		if v == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", v/1e9)
	}
	cores := func(r result, v float64, bps float64) string {
		if bps == 0 {
			return "—"
		}
		if !r.stackCPU {
			return "(kernel)"
		}
		return fmt.Sprintf("%.2f", v)
	}
	us := func(d time.Duration, n int) string {
		if n == 0 {
			return "—"
		}
		return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond))
	}
	row("TCP upload (sandbox → server), Gbit/s", "≥ 10", func(r result) string { return gbits(r.up) })
	row("TCP download (server → sandbox), Gbit/s", "≥ 10", func(r result) string { return gbits(r.down) })
	row("stack CPU during upload, cores", "≤ 1", func(r result) string { return cores(r, r.upCPU, r.up) })
	row("stack CPU during download, cores", "≤ 1", func(r result) string { return cores(r, r.downCPU, r.down) })
	row("connect p50, µs", "≤ 150", func(r result) string { return us(r.connect.P50, r.connect.N) })
	row("connect p99, µs", "≤ 400", func(r result) string { return us(r.connect.P99, r.connect.N) })
	row("stack CPU per connection, µs", "≤ 150", func(r result) string {
		if !r.stackCPU && r.connect.N > 0 {
			return "(kernel)"
		}
		return us(r.connCPU, r.connect.N)
	})
	row("DNS answer p50, µs", "", func(r result) string { return us(r.dns.P50, r.dns.N) })
	row("DNS answer p99, µs", "", func(r result) string { return us(r.dns.P99, r.dns.N) })
	for _, r := range rs {
		for _, e := range r.errs {
			fmt.Fprintf(w, "\n%s: %s", r.name, e)
		}
	}
	fmt.Fprintln(w)

	var ak *result
	for i := range rs {
		if rs[i].name == "agentkernel" && len(rs[i].errs) == 0 {
			ak = &rs[i]
		}
	}
	if len(startup) == 2 {
		fmt.Fprintf(w, "\n`run --image host -- /bin/true`, %d runs per mode, interleaved:\n\n", o.nStart)
		harness.Report(w, startup)
	}
	fmt.Fprintln(w, "\ngoals (agentkernel):")
	if ak == nil {
		fmt.Fprintln(w, "  agentkernel not measured (-agentkernel, -cases, or the errors above)")
	} else {
		fmt.Fprintf(w, "  upload ≥ %.0f Gbit/s at ≤ %.0f core: %.2f Gbit/s at %.2f cores: %s\n", goalGbits, goalCores, ak.up/1e9, ak.upCPU, verdict(ak.up >= goalGbits*1e9 && ak.upCPU <= goalCores))
		fmt.Fprintf(w, "  download ≥ %.0f Gbit/s at ≤ %.0f core: %.2f Gbit/s at %.2f cores: %s\n", goalGbits, goalCores, ak.down/1e9, ak.downCPU, verdict(ak.down >= goalGbits*1e9 && ak.downCPU <= goalCores))
		fmt.Fprintf(w, "  connect p50 ≤ %v: %v: %s\n", goalConnectP50, ak.connect.P50.Round(time.Microsecond), verdict(ak.connect.N > 0 && ak.connect.P50 <= goalConnectP50))
		fmt.Fprintf(w, "  connect p99 ≤ %v: %v: %s\n", goalConnectP99, ak.connect.P99.Round(time.Microsecond), verdict(ak.connect.N > 0 && ak.connect.P99 <= goalConnectP99))
		fmt.Fprintf(w, "  CPU per connection ≤ %v: %v: %s\n", goalConnCPU, ak.connCPU.Round(time.Microsecond), verdict(ak.connect.N > 0 && ak.connCPU <= goalConnCPU))
	}
	if len(startup) == 2 && startup[0].Runs > 0 && startup[1].Runs > 0 {
		d := startup[1].Median - startup[0].Median
		fmt.Fprintf(w, "  run start-up added ≤ %v: %+.2f ms: %s\n", goalStartup, float64(d)/float64(time.Millisecond), verdict(d <= goalStartup))
	}
}

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}
