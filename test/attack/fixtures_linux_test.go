//go:build linux

package attack

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// fixtures are the host-side things the probes aim at: canaries outside
// every mount, a host process, listeners on the host's addresses, a SysV
// shm segment, another sandbox's secret, and the test image.
type fixtures struct {
	mode      string // "root" or "rootless"
	tmp       string
	dataDir   string
	layers    []string
	probesDir string // host directory of the built probes

	token       string // content of the canaries
	netToken    string // what the host listeners answer
	victimToken string // argv[0] of the host victim process
	hostCanary  string // a host file outside every mount
	homeDir     string // the fake caller's $HOME (permissive mounts it)
	homeCanary  string
	shadowSum   string // SHA-256 of the host's /etc/shadow, if readable

	victim   *exec.Cmd
	tcpPort  int
	udpPort  int
	abstract string
	unixPath string
	hostIPs  []string
	shmID    int
	shmKey   int

	otherSecret string // path of the other sandbox's secret inside it
	otherToken  string
	otherUpper  string // host path where that secret can be reached from the host
	otherPID    int

	// other is the backend under test when it is not native.
	other *backendUnderTest

	closers []func()
}

func randToken(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newFixtures creates everything under a fresh temporary directory.
func newFixtures(t *testing.T, mode, probesBin string) *fixtures {
	t.Helper()
	tmp, err := os.MkdirTemp("", "attack-")
	if err != nil {
		t.Fatal(err)
	}
	// World-traversable: the rootless variant and the sandbox's shifted
	// root never need it, but a 0700 parent would make "blocked" results
	// meaningless for a rootless sandbox (the host user could not read
	// the canaries either).
	must(t, os.Chmod(tmp, 0o755))
	f := &fixtures{
		mode:        mode,
		tmp:         tmp,
		dataDir:     filepath.Join(tmp, "data"),
		token:       randToken("CANARY-"),
		netToken:    randToken("HOSTNET-"),
		victimToken: randToken("attack-victim-"),
		otherToken:  randToken("OTHER-"),
		otherSecret: "/etc/attack-other-secret",
	}
	t.Cleanup(f.close)

	for _, d := range []string{f.dataDir, filepath.Join(tmp, "host"), filepath.Join(tmp, "home"), filepath.Join(tmp, "ws")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	f.hostCanary = filepath.Join(tmp, "host", "secret-canary")
	must(t, os.WriteFile(f.hostCanary, []byte("host secret "+f.token+"\n"), 0o644))
	f.homeDir = filepath.Join(tmp, "home")
	f.homeCanary = filepath.Join(f.homeDir, ".attack-home-canary")
	must(t, os.WriteFile(f.homeCanary, []byte("home secret "+f.token+"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.dataDir, "attack-canary"), []byte("data dir "+f.token+"\n"), 0o644))
	if b, err := os.ReadFile("/etc/shadow"); err == nil {
		sum := sha256.Sum256(b)
		f.shadowSum = hex.EncodeToString(sum[:])
	}

	f.probesDir = probesBin
	f.layers = buildImage(t, f.dataDir, probesBin, image.DefaultIDMap(), f.token)
	f.leakDirFD(t)
	f.startVictim(t)
	f.startListeners(t)
	f.makeShm(t)
	return f
}

func (f *fixtures) close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
	_ = os.RemoveAll(f.tmp)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildImage writes the test image as two layer directories, the way the
// image store leaves them: a base layer with busybox and /etc, and a
// layer with the probes (and a setuid-root copy of setuid_nnp). As root,
// ownership is shifted by idmap like the store's unpack does.
func buildImage(t *testing.T, dataDir, probesBin string, idmap image.IDMap, token string) []string {
	t.Helper()
	base := filepath.Join(dataDir, "layers", "base")
	top := filepath.Join(dataDir, "layers", "probes")
	type entry struct {
		path    string
		mode    os.FileMode // with os.ModeDir / os.ModeSymlink / os.ModeSetuid
		content []byte
		target  string // symlink target, or host file to copy
		uid     int
	}
	busybox, err := os.ReadFile("/bin/busybox")
	if err != nil {
		testenv.Missing(t, "busybox-static is not installed (/bin/busybox): apt-get install busybox-static")
	}
	entries := map[string][]entry{base: {
		{path: "bin", mode: os.ModeDir | 0o755},
		{path: "bin/busybox", mode: 0o755, content: busybox},
		{path: "etc", mode: os.ModeDir | 0o755},
		{path: "etc/passwd", mode: 0o644, content: []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n")},
		{path: "etc/group", mode: 0o644, content: []byte("root:x:0:\ntty:x:5:\nuser:x:1000:\nnobody:x:65534:\n")},
		{path: "etc/attack-lower", mode: 0o644, content: []byte("original layer content\n")},
		{path: "root", mode: os.ModeDir | 0o700},
		{path: "root-only", mode: 0o400, content: []byte("root only " + token + "\n")},
		{path: "tmp", mode: os.ModeDir | 0o1777},
		{path: "home", mode: os.ModeDir | 0o755},
		{path: "workspace", mode: os.ModeDir | 0o755},
		{path: "proc", mode: os.ModeDir | 0o555},
		{path: "sys", mode: os.ModeDir | 0o555},
		{path: "dev", mode: os.ModeDir | 0o755},
		{path: "run", mode: os.ModeDir | 0o755},
	}}
	for _, applet := range []string{"sh", "sleep", "true", "false", "cat", "ls", "echo", "id", "env", "ps", "kill"} {
		entries[base] = append(entries[base], entry{path: "bin/" + applet, mode: os.ModeSymlink, target: "busybox"})
	}
	entries[top] = []entry{{path: "probes", mode: os.ModeDir | 0o755}}
	names, err := os.ReadDir(probesBin)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		entries[top] = append(entries[top], entry{path: "probes/" + n.Name(), mode: 0o755, target: filepath.Join(probesBin, n.Name())})
	}
	entries[top] = append(entries[top], entry{path: "probes/setuid_nnp.suid", mode: os.ModeSetuid | 0o755, target: filepath.Join(probesBin, "setuid_nnp")})

	for _, dir := range []string{base, top} {
		must(t, os.MkdirAll(dir, 0o755))
		for _, e := range entries[dir] {
			p := filepath.Join(dir, e.path)
			switch {
			case e.mode&os.ModeDir != 0:
				must(t, os.MkdirAll(p, 0o755))
			case e.mode&os.ModeSymlink != 0:
				must(t, os.Symlink(e.target, p))
			case e.target != "":
				b, err := os.ReadFile(e.target)
				must(t, err)
				must(t, os.WriteFile(p, b, 0o600))
			default:
				must(t, os.WriteFile(p, e.content, 0o600))
			}
			if !idmap.IsZero() {
				must(t, os.Lchown(p, idmap.HostUID(e.uid), idmap.HostGID(e.uid)))
			}
			if e.mode&os.ModeSymlink == 0 {
				// After chown, which clears set-id bits.
				must(t, os.Chmod(p, e.mode&(os.ModePerm|os.ModeSetuid|os.ModeSticky)))
			}
		}
		if !idmap.IsZero() {
			must(t, os.Lchown(dir, idmap.HostUID(0), idmap.HostGID(0)))
		}
	}
	return []string{base, top}
}

// leakDirFD opens the host directory holding the canary without
// close-on-exec and keeps it open for the whole battery, like a careless
// caller (a shell's `exec 9</dir`, an agent harness) leaves descriptors
// open when it starts agentkernel. agentkernel must not hand it on.
func (f *fixtures) leakDirFD(t *testing.T) {
	t.Helper()
	fd, err := syscall.Open(filepath.Dir(f.hostCanary), syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	must(t, err)
	f.closers = append(f.closers, func() { syscall.Close(fd) })
}

// startVictim starts a host process with a unique argv[0] that probes
// look for and try to signal.
func (f *fixtures) startVictim(t *testing.T) {
	t.Helper()
	cmd := exec.Command("/bin/sleep", "3600")
	cmd.Args[0] = f.victimToken
	must(t, cmd.Start())
	f.victim = cmd
	f.closers = append(f.closers, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// victimAlive reports whether the host victim still runs: the child of
// this process with the victim's argv[0] (never reaped before the
// fixtures close, so its pid cannot be another process's).
func (f *fixtures) victimAlive() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", f.victim.Process.Pid))
	if err != nil {
		return false
	}
	if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", f.victim.Process.Pid)); err != nil || !strings.HasPrefix(string(cmd), f.victimToken+"\x00") {
		return false
	}
	// Field 3 is the state; Z means it died and waits to be reaped.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}

// startListeners opens the host services the network probes try to
// reach: TCP and UDP on every address, an abstract and a path unix
// socket. Each answers with netToken, so a probe can tell the host's
// listener from anything in its own namespace.
func (f *fixtures) startListeners(t *testing.T) {
	t.Helper()
	serve := func(l net.Listener) {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(f.netToken + "\n"))
			_ = c.Close()
		}
	}
	tl, err := net.Listen("tcp", ":0")
	must(t, err)
	f.tcpPort = tl.Addr().(*net.TCPAddr).Port
	go serve(tl)
	ul, err := net.ListenPacket("udp", ":0")
	must(t, err)
	f.udpPort = ul.LocalAddr().(*net.UDPAddr).Port
	go func() {
		buf := make([]byte, 512)
		for {
			_, addr, err := ul.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = ul.WriteTo([]byte(f.netToken), addr)
		}
	}()
	f.abstract = randToken("attack-abstract-")
	al, err := net.Listen("unix", "@"+f.abstract)
	must(t, err)
	go serve(al)
	f.unixPath = filepath.Join(f.tmp, "host", "attack.sock")
	pl, err := net.Listen("unix", f.unixPath)
	must(t, err)
	go serve(pl)
	f.closers = append(f.closers, func() { tl.Close(); ul.Close(); al.Close(); pl.Close() })

	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		f.hostIPs = append(f.hostIPs, ipn.IP.String())
	}
}

// makeShm creates a SysV shared-memory segment with a known key.
func (f *fixtures) makeShm(t *testing.T) {
	t.Helper()
	for i := 0; i < 10; i++ {
		var b [4]byte
		_, _ = rand.Read(b[:])
		key := int(b[0])<<16 | int(b[1])<<8 | int(b[2]) | 0x41000000
		id, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
		if err == nil {
			f.shmID, f.shmKey = id, key
			f.closers = append(f.closers, func() { _, _ = unix.SysvShmCtl(id, unix.IPC_RMID, nil) })
			return
		}
	}
	t.Fatal("could not create a SysV shm segment")
}

// startOtherSandbox starts a long-running sandbox that writes a secret
// into its own writable layer, and finds from the host where that layer
// can be read (so the probe gets the best possible hint).
func (f *fixtures) startOtherSandbox(t *testing.T, r *runner) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	spec := r.spec("moderate", "other")
	marker := strconv.Itoa(31000 + int(time.Now().UnixNano()%1000))
	spec.Args = []string{"/bin/sh", "-c", "echo " + f.otherToken + " > " + f.otherSecret + " && exec /bin/sleep " + marker}
	spec.Resources.Timeout = 10 * time.Minute
	var wg sync.WaitGroup
	wg.Add(1)
	runErr := make(chan string, 1)
	go func() {
		defer wg.Done()
		var out tailWriter
		out.max = 4 << 10
		res, err := r.otherSandboxBackend().Run(ctx, spec, sandbox.Stdio{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &out})
		runErr <- fmt.Sprintf("exit %d, err %v, output %q", res.ExitCode, err, out.String())
	}()
	f.closers = append(f.closers, func() { cancel(); wg.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if pid := f.findProc("/bin/sleep\x00" + marker + "\x00"); pid > 0 {
			f.otherPID = pid
			f.otherUpper = fmt.Sprintf("/proc/%d/root", pid)
			if b, err := os.ReadFile(f.otherUpper + f.otherSecret); err == nil && strings.Contains(string(b), f.otherToken) {
				if up := upperDirOf(pid); up != "" {
					f.otherUpper += " " + up
				}
				t.Logf("%s: other sandbox pid %d, its secret is readable from the host at %s", f.mode, pid, f.otherUpper)
				return
			}
		}
		select {
		case msg := <-runErr:
			t.Logf("%s: the other sandbox ended early (%s); read_other_upper runs without a host hint", f.mode, msg)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Logf("%s: the other sandbox did not come up; read_other_upper runs without a host hint", f.mode)
}

// findProc returns the pid of this battery's host process (its token in
// the environment) whose cmdline is exactly cmdline.
func (f *fixtures) findProc(cmdline string) int {
	mark := []byte("ATTACK_TOKEN=" + f.token + "\x00")
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err != nil || string(b) != cmdline {
			continue
		}
		if env, _ := os.ReadFile("/proc/" + e.Name() + "/environ"); bytes.Contains(append(env, 0), mark) {
			return pid
		}
	}
	return 0
}

// upperDirOf reads the upperdir option of pid's root overlay.
func upperDirOf(pid int) string {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return ""
	}
	defer fh.Close()
	s := bufio.NewScanner(fh)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && fields[4] == "/" {
			for _, o := range strings.Split(fields[len(fields)-1], ",") {
				if up, ok := strings.CutPrefix(o, "upperdir="); ok {
					return up
				}
			}
		}
	}
	return ""
}

// treeHash summarises a directory tree: every path with its type, mode,
// owner, size, symlink target and content hash.
func treeHash(root string) (string, error) {
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		rel, _ := filepath.Rel(root, p)
		line := fmt.Sprintf("%s %v %d:%d %d", rel, fi.Mode(), st.Uid, st.Gid, fi.Size())
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			line += " -> " + t
		case fi.Mode().IsRegular():
			fh, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, fh)
			fh.Close()
			if err != nil {
				return err
			}
			line += " " + hex.EncodeToString(h.Sum(nil))
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:]), err
}

// treeList lists the entries of a tree (for reporting what changed).
func treeList(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// openHostPTY opens a pseudo-terminal pair on the host; the slave plays
// the user's terminal handed to a sandbox as stdin.
func openHostPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, s, nil
}

// peakRSS returns VmHWM and VmRSS of this process in bytes.
func peakRSS() (hwm, rss int64) {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmHWM":
			hwm = n << 10
		case "VmRSS":
			rss = n << 10
		}
	}
	return hwm, rss
}

// resetPeakRSS makes VmHWM start again from the current RSS.
func resetPeakRSS() error { return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }
