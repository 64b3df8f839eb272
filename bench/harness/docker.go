package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(work, "docker")
	sock := "unix://" + filepath.Join(dir, "docker.sock")
	d := exec.Command(dockerd, "--bridge=none", "--iptables=false", "--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"), "--pidfile", filepath.Join(dir, "docker.pid"), "-H", sock)
	logf, err := os.Create(filepath.Join(work, "dockerd.log"))
	if err != nil {
		return nil, nil, err
	}
	d.Stdout, d.Stderr = logf, logf
	if err := d.Start(); err != nil {
		logf.Close()
		return nil, nil, err
	}
	client = []string{cli, "-H", sock}
	stop = func() {
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
		_ = logf.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if exec.Command(cli, "-H", sock, "info").Run() == nil {
			return client, stop, nil
		}
	}
	stop()
	return nil, nil, fmt.Errorf("dockerd did not answer within 30 s (log: %s)", logf.Name())
}
