//go:build linux

// Probe workspace_setuid tries to leave a set-user-ID (or set-group-ID,
// or file-capability) executable in the writable workspace: through the
// host's idmapped bind, sandbox root is host root there, so such a file
// would be a setuid-root binary on the host. It tries every route:
// chmod/fchmod/fchmodat/fchmodat2, open/creat/mknod with the mode bits,
// chown of a setuid file, and security.capability xattrs. The runner also
// scans the host's copy of the workspace afterwards.
package main

import (
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "workspace_setuid"

func main() { probe.Run(name, attack, control) }

func attack() {
	dir := "/workspace"
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		report("blocked", "no /workspace in this profile")
	}
	got, errs := try(dir)
	if len(got) > 0 {
		if fs := fsType(dir); fs == "overlay" {
			report("blocked", "the workspace is copy-on-write (overlay): set-id files stay in the sandbox's own layer: "+strings.Join(got, "; "))
		}
		report("allowed", "set-id files in the workspace: "+strings.Join(got, "; "))
	}
	report("blocked", strings.Join(errs, "; "))
}

// control: outside a sandbox the same routes leave set-id files in a
// directory of its own (removed at once): the owner of a file may set
// its set-user-ID bit.
func control() {
	dir, err := os.MkdirTemp("", "attack-setuid-control-")
	if err != nil {
		report(probe.Error, err.Error())
	}
	got, errs := try(dir)
	os.RemoveAll(dir)
	if len(got) > 0 {
		report(probe.Reachable, fmt.Sprintf("outside a sandbox %d routes leave set-id files, e.g. %s", len(got), got[0]))
	}
	report(probe.Unreachable, strings.Join(errs, "; "))
}

// try takes every route to a set-id file in dir.
func try(dir string) (got, errs []string) {
	unix.Umask(0)
	check := func(what string, err error, path string) {
		if err != nil {
			errs = append(errs, what+": "+err.Error())
			return
		}
		var st unix.Stat_t
		if unix.Stat(path, &st) == nil && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			got = append(got, fmt.Sprintf("%s (%s mode %o uid %d)", what, path, st.Mode&0o7777, st.Uid))
		}
	}
	p := func(n string) string { return dir + "/attack-suid-" + n }
	create := func(n string) string {
		f := p(n)
		os.WriteFile(f, []byte("#!/bin/sh\nid\n"), 0o755)
		return f
	}

	f := create("chmod")
	check("chmod", unix.Chmod(f, 0o4755), f)
	f = create("fchmodat")
	check("fchmodat", unix.Fchmodat(unix.AT_FDCWD, f, 0o6755, 0), f)
	f = create("fchmodat2")
	fb := append([]byte(f), 0)
	atFdcwd := unix.AT_FDCWD
	_, _, e := unix.Syscall6(452 /* fchmodat2 */, uintptr(atFdcwd), uintptr(unsafe.Pointer(&fb[0])), 0o4755, 0, 0, 0)
	check("fchmodat2", errnoErr(e), f)
	f = create("fchmod")
	if fd, err := unix.Open(f, unix.O_RDONLY, 0); err == nil {
		check("fchmod", unix.Fchmod(fd, 0o4755), f)
		unix.Close(fd)
	}
	f = p("open")
	if fd, err := unix.Open(f, unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, 0o4755); err == nil {
		unix.Close(fd)
		check("open(O_CREAT, 04755)", nil, f)
	} else {
		check("open(O_CREAT, 04755)", err, f)
	}
	f = p("openat2")
	how := unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY | unix.O_EXCL, Mode: 0o4755}
	if fd, err := unix.Openat2(unix.AT_FDCWD, f, &how); err == nil {
		unix.Close(fd)
		check("openat2", nil, f)
	} else {
		check("openat2", err, f)
	}
	f = p("creat")
	if fd, err := unix.Creat(f, 0o4755); err == nil {
		unix.Close(fd)
		check("creat", nil, f)
	} else {
		check("creat", err, f)
	}
	f = p("mknod")
	check("mknod(S_IFREG|04755)", unix.Mknod(f, unix.S_IFREG|0o4755, 0), f)
	f = p("mkdir-sgid")
	check("mkdir(02755)", unix.Mkdir(f, 0o2755), f)
	f = create("chown")
	unix.Chmod(f, 0o755)
	check("chown after chmod", unix.Chown(f, 0, 0), f)
	f = create("xattr")
	// A v2 security.capability granting CAP_SETUID (7) permitted+effective.
	capv := []byte{0x01, 0x00, 0x00, 0x02, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := unix.Setxattr(f, "security.capability", capv, 0); err == nil {
		got = append(got, "security.capability set on "+f)
	} else {
		errs = append(errs, "setxattr security.capability: "+err.Error())
	}
	return got, errs
}

// fsType is the filesystem type of the mount at dir, from mountinfo.
func fsType(dir string) string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	t := ""
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f := strings.Fields(pre)
		if ok && len(f) > 4 && f[4] == dir {
			t = strings.Fields(post)[0] // the last mount on dir wins
		}
	}
	return t
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func report(result, detail string) { probe.Report(name, result, detail) }
