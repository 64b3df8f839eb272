//go:build linux

// Probe disk_fill writes 1 MiB blocks into each writable filesystem of the
// sandbox in turn (the root's writable layer via /etc, then /tmp) until a
// write fails or a cap is reached. "blocked": ENOSPC/EDQUOT/EFBIG (or the
// memory limit, which the runner sees as SIGKILL) stopped every one below
// the cap. Each file is removed before the next.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "disk_fill"

func main() { probe.Run(name, attack, control) }

func capMB() int {
	if v, err := strconv.Atoi(os.Getenv("ATTACK_DISK_CAP_MB")); err == nil {
		return v
	}
	return 4096
}

// fill writes up to limit MiB to p and removes it; it returns how many
// MiB it wrote and the error that stopped it.
func fill(p string, limit int) (int, error) {
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i)
	}
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	defer os.Remove(p)
	defer f.Close()
	mb := 0
	for ; mb < limit; mb++ {
		if _, err = f.Write(block); err != nil {
			return mb, err
		}
	}
	return mb, nil
}

func attack() {
	limit := capMB()
	var notes []string
	for _, p := range []string{"/etc/attack-fill", "/tmp/attack-fill"} {
		mb, err := fill(p, limit)
		if err == nil {
			report("allowed", fmt.Sprintf("wrote %d MiB (the cap) to %s", limit, p))
		}
		notes = append(notes, fmt.Sprintf("%s full after %d MiB: %v", p, mb, err))
	}
	report("blocked", strings.Join(notes, "; "))
}

// control, scaled down: outside a sandbox the same writes go through (64
// MiB into a file of its own), no file-size limit applies, and the
// filesystem has room beyond the probe's cap, so only a sandbox's limit
// can stop the probe below it.
func control() {
	limit := capMB()
	dir, err := os.MkdirTemp("", "attack-fill-control-")
	if err != nil {
		report(probe.Error, err.Error())
	}
	defer os.RemoveAll(dir)
	mb, err := fill(filepath.Join(dir, "fill"), 64)
	if err != nil {
		os.RemoveAll(dir)
		report(probe.Unreachable, fmt.Sprintf("writing 64 MiB outside a sandbox stopped after %d MiB: %v", mb, err))
	}
	var fsz unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_FSIZE, &fsz)
	var st unix.Statfs_t
	unix.Statfs(dir, &st)
	free := int64(st.Bavail) * int64(st.Bsize) >> 20
	detail := fmt.Sprintf("wrote 64 MiB outside a sandbox; RLIMIT_FSIZE %d; %d MiB free where it wrote; the probe's cap is %d MiB", int64(fsz.Cur), free, limit)
	os.RemoveAll(dir)
	switch {
	case fsz.Cur != unix.RLIM_INFINITY && int64(fsz.Cur) < int64(limit)<<20:
		report(probe.NotApplicable, "a file-size limit stops the probe outside a sandbox too: "+detail)
	case free < int64(limit):
		report(probe.NotApplicable, "this machine has less room than the probe's cap, sandbox or not: "+detail)
	}
	report(probe.Reachable, detail)
}

func report(result, detail string) { probe.Report(name, result, detail) }
