//go:build linux

// Probe workspace_chown tries to leave files in the host's project
// directory owned by other host users: it creates files in a writable
// /workspace and chowns them to uids and gids that are real users on a
// typical host (1000, 1001, 65534), and to root. Through an idmap that
// shows host ids as themselves, a chown to 1001 inside made the file
// host user 1001's. The sandbox may own files in its own ids; where the
// chowns land on the host is judged by the runner (judgeChown: the
// sandbox's own block of host ids, or the invoking user) and by its host
// check ("no file in a host workspace belongs to another host user").
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "workspace_chown"

func main() { probe.Run(name, attack, control) }

// ids are the owners the probe gives its files.
var ids = []int{1000, 1001, 65534, 0}

// try creates one file per id in dir and chowns it; it returns the
// chowns that succeeded and the errors of those that did not.
func try(dir string) (done, errs []string) {
	for _, id := range ids {
		f := fmt.Sprintf("%s/attack-chown-%d", dir, id)
		if err := os.WriteFile(f, []byte("x\n"), 0o644); err != nil {
			errs = append(errs, fmt.Sprintf("create %s: %v", f, err))
			continue
		}
		if err := unix.Lchown(f, id, id); err != nil {
			errs = append(errs, fmt.Sprintf("chown %d:%d: %v", id, id, err))
			continue
		}
		done = append(done, fmt.Sprintf("%d:%d", id, id))
	}
	return done, errs
}

func attack() {
	dir := "/workspace"
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		report("blocked", "no /workspace in this profile")
	}
	done, errs := try(dir)
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil && st.Type == unix.OVERLAYFS_SUPER_MAGIC {
		report("blocked", "the workspace is copy-on-write (overlay): the chowns stay in the sandbox's own layer: "+strings.Join(done, ", "))
	}
	if len(done) == 0 {
		report("blocked", "no chown got through: "+strings.Join(errs, "; "))
	}
	// Inside, the sandbox owns what it chowns; the host check says whose
	// the files are on the host.
	report("blocked", "chowned inside to "+strings.Join(done, ", ")+"; the runner judges the host owners")
}

// control: outside a sandbox, root's chown gives a file to another host
// user (in a directory of its own, removed at once); an unprivileged
// user cannot, with or without a sandbox.
func control() {
	dir, err := os.MkdirTemp("", "attack-chown-control-")
	if err != nil {
		report(probe.Error, err.Error())
	}
	done, errs := try(dir)
	os.RemoveAll(dir)
	// A chown to one's own ids gives nothing away.
	own := fmt.Sprintf("%d:%d", os.Getuid(), os.Getuid())
	done = slices.DeleteFunc(done, func(d string) bool { return d == own })
	if !probe.Privileged() && len(done) == 0 && probe.RefusedText(errs, false) {
		report(probe.NotApplicable, "an unprivileged user cannot give files to other users, with or without a sandbox: "+strings.Join(errs, "; "))
	}
	if len(done) > 0 {
		report(probe.Reachable, "outside a sandbox root gives files to host users "+strings.Join(done, ", "))
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

func report(result, detail string) { probe.Report(name, result, detail) }
