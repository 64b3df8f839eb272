package harness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// StartDocker returns the docker client command line for a daemon: the
// one already answering on the default socket, else a dockerd started
// here with its own data root, exec root and socket under work, without
// bridge or iptables (MACHINE-NOTES), which stop ends.
func StartDocker(work string) (client []string, stop func(), err error) {
	cli := "/usr/bin/docker" // the client that came with dockerd
	if _, err := os.Stat(cli); err != nil {
		if cli, err = exec.LookPath("docker"); err != nil {
			return nil, nil, err
		}
	}
	if exec.Command(cli, "info").Run() == nil {
		return []string{cli}, func() {}, nil
	}
	host, stop, err := StartPrivateDocker(work)
	if err != nil {
		return nil, nil, err
	}
	return []string{cli, "-H", host}, stop, nil
}

// StartPrivateDocker starts a dockerd of its own, whatever else runs:
// data root, exec root and socket under work/docker, no bridge, no
// iptables (MACHINE-NOTES). It returns the daemon's address
// (unix://…) once the daemon answers, and stop, which ends it.
func StartPrivateDocker(work string) (host string, stop func(), err error) {
	cli := "/usr/bin/docker" // the client that came with dockerd
	if _, err := os.Stat(cli); err != nil {
		if cli, err = exec.LookPath("docker"); err != nil {
			return "", nil, err
		}
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(work, "docker")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	sock := "unix://" + filepath.Join(dir, "docker.sock")
	d := exec.Command(dockerd, "--bridge=none", "--iptables=false", "--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"), "--pidfile", filepath.Join(dir, "docker.pid"), "-H", sock)
	logf, err := os.Create(filepath.Join(work, "dockerd.log"))
	if err != nil {
		return "", nil, err
	}
	d.Stdout, d.Stderr = logf, logf
	// In a mount namespace of its own: its layers' and containers'
	// mounts never reach the machine's mount table (tests that compare
	// it run beside this one).
	d.SysProcAttr = &syscall.SysProcAttr{}
	ownMountNamespace(d.SysProcAttr)
	if err := d.Start(); err != nil {
		logf.Close()
		return "", nil, err
	}
	stop = func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
		_ = logf.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if exec.Command(cli, "-H", sock, "info").Run() == nil {
			return sock, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("dockerd did not answer within 30 s (log: %s)", logf.Name())
}

// StartPodmanService starts `podman system service` of its own on a
// socket under work/podman, with its own storage (--root, --runroot),
// so that the machine's podman state is left alone. It returns the
// service's address (unix://…) once it answers, and stop, which ends it.
func StartPodmanService(work string) (host string, stop func(), err error) {
	podman, err := exec.LookPath("podman")
	if err != nil {
		return "", nil, err
	}
	dir := filepath.Join(work, "podman")
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return "", nil, err
	}
	sockPath := filepath.Join(dir, "podman.sock")
	sock := "unix://" + sockPath
	p := exec.Command(podman, "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--tmpdir", filepath.Join(dir, "tmp"), "--cgroup-manager", "cgroupfs", "--events-backend", "file", "--log-level", "info",
		"system", "service", "--time=0", sock)
	// Its own configuration: no containers.conf or storage.conf of the
	// machine's decides where its state goes.
	// Its containers' limits on open files and processes stay within
	// what this machine's root may set (MACHINE-NOTES).
	p.Env = append(os.Environ(), "CONTAINERS_STORAGE_CONF="+filepath.Join(dir, "storage.conf"), "CONTAINERS_CONF="+filepath.Join(dir, "containers.conf"))
	if err := os.WriteFile(filepath.Join(dir, "containers.conf"), []byte("[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n"), 0o600); err != nil {
		return "", nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "storage.conf"), []byte(fmt.Sprintf("[storage]\ndriver = \"overlay\"\nrunroot = %q\ngraphroot = %q\n", filepath.Join(dir, "run"), filepath.Join(dir, "root"))), 0o600); err != nil {
		return "", nil, err
	}
	logf, err := os.Create(filepath.Join(work, "podman.log"))
	if err != nil {
		return "", nil, err
	}
	p.Stdout, p.Stderr = logf, logf
	// A mount namespace of its own, as dockerd's (StartPrivateDocker).
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	ownMountNamespace(p.SysProcAttr)
	if err := p.Start(); err != nil {
		logf.Close()
		return "", nil, err
	}
	stop = func() {
		// The service's conmon processes are in its process group.
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		_ = p.Wait()
		_ = logf.Close()
		// The storage's mounts (and those of containers it left)
		// outlive the service.
		unmountUnder(dir)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("unix", sockPath); err == nil {
			c.Close()
			return sock, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("podman system service did not answer within 30 s (log: %s)", logf.Name())
}

// unmountUnder detaches every mount below dir, deepest first, until
// none has come back for half a second (podman's cleanup processes,
// started by the containers' monitors, mount the storage again), for at
// most 10 s.
func unmountUnder(dir string) {
	quiet := 0
	for deadline := time.Now().Add(10 * time.Second); quiet < 5 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if unmountOnce(dir) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
}

func unmountOnce(dir string) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = exec.Command("umount", "-l", p).Run()
	}
	return len(points)
}
