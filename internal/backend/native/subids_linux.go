package native

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	osuser "os/user"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Rootless, the init's user namespace maps the caller to root. Where the
// administrator delegated subordinate ids to the caller (/etc/subuid,
// /etc/subgid, as useradd does, and as rootless podman uses them) and
// the setuid helpers newuidmap/newgidmap are installed, sandbox ids
// 1…65535 are mapped onto the caller's first subordinate range too, so
// that apt, useradd, chown and su work inside: the init is cloned into
// its user namespace with no map, the parent runs the helpers, and the
// init waits for its 'M' before it does anything (initConfig.SubIDs).
// Without them it keeps the one-id map.

// subIDs are a caller's subordinate ranges and the helpers that map them.
type subIDs struct {
	uidStart, uidCount int
	gidStart, gidCount int
	newuidmap          string
	newgidmap          string
}

// lookupSubIDs finds the caller's first subordinate uid and gid ranges
// (by user name or uid) and the helpers; ok is false where either is
// missing.
func lookupSubIDs() (subIDs, bool) {
	var s subIDs
	uid := os.Getuid()
	name := ""
	if u, err := osuser.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	var ok bool
	if s.uidStart, s.uidCount, ok = subRange("/etc/subuid", name, uid); !ok {
		return s, false
	}
	if s.gidStart, s.gidCount, ok = subRange("/etc/subgid", name, uid); !ok {
		return s, false
	}
	for _, dir := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		if s.newuidmap == "" && isExecutable(dir+"/newuidmap") {
			s.newuidmap = dir + "/newuidmap"
		}
		if s.newgidmap == "" && isExecutable(dir+"/newgidmap") {
			s.newgidmap = dir + "/newgidmap"
		}
	}
	return s, s.newuidmap != "" && s.newgidmap != ""
}

func isExecutable(p string) bool {
	return unix.Access(p, unix.X_OK) == nil
}

// subRange is the first range of /etc/subuid or /etc/subgid (path) that
// belongs to the user (by name or uid), at most subIDSize-1 ids.
func subRange(path, name string, uid int) (start, count int, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fields) != 3 || (fields[0] != name && fields[0] != strconv.Itoa(uid)) || fields[0] == "" {
			continue
		}
		start, err1 := strconv.Atoi(fields[1])
		count, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil || start < 0 || count <= 0 {
			continue
		}
		return start, min(count, subIDSize-1), true
	}
	return 0, 0, false
}

// mapSubIDs writes the maps of pid's user namespace (the init, cloned
// with no map) with the helpers: root is the caller, 1… its subordinate
// range.
func (s subIDs) mapSubIDs(pid int) error {
	run := func(helper string, own, start, count int) error {
		argv := []string{helper, strconv.Itoa(pid), "0", strconv.Itoa(own), "1", "1", strconv.Itoa(start), strconv.Itoa(count)}
		devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer devnull.Close()
		errR, errW, err := os.Pipe()
		if err != nil {
			return err
		}
		defer errR.Close()
		hp, err := syscall.ForkExec(helper, argv, &syscall.ProcAttr{
			Env:   []string{"PATH=/usr/bin:/bin"},
			Files: []uintptr{devnull.Fd(), devnull.Fd(), errW.Fd()},
		})
		errW.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", helper, err)
		}
		msg := make([]byte, 512)
		n, _ := errR.Read(msg)
		var ws unix.WaitStatus
		for {
			_, err := unix.Wait4(hp, &ws, 0, nil)
			if err != unix.EINTR {
				break
			}
		}
		if !ws.Exited() || ws.ExitStatus() != 0 {
			return fmt.Errorf("%s failed: %s", helper, strings.TrimSpace(string(msg[:n])))
		}
		return nil
	}
	if err := run(s.newuidmap, os.Getuid(), s.uidStart, s.uidCount); err != nil {
		return err
	}
	return run(s.newgidmap, os.Getgid(), s.gidStart, s.gidCount)
}

// mapOwnID is the fallback when the helpers fail: the one-id map an
// unprivileged process may write itself.
func mapOwnID(pid int) error {
	proc := "/proc/" + strconv.Itoa(pid)
	if err := os.WriteFile(proc+"/uid_map", []byte("0 "+strconv.Itoa(os.Getuid())+" 1\n"), 0); err != nil {
		return err
	}
	if err := os.WriteFile(proc+"/setgroups", []byte("deny"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(proc+"/gid_map", []byte("0 "+strconv.Itoa(os.Getgid())+" 1\n"), 0)
}

// argv0InitWait is the first program of a rootless init whose user
// namespace the parent maps with the helpers, where no stub exists: it
// waits for the maps, then execs agentkernel as the init.
const argv0InitWait = "agentkernel:init-wait"

// forkUnmapped starts a rootless init in a user namespace with no map
// yet (sys has CLONE_NEWUSER and no mappings), with files as its
// descriptors 0-4, and returns its pid and the write end of a pipe whose
// closing (once the parent has written the maps) lets it go on. It must
// not exec agentkernel before: an execve by an unmapped uid drops every
// capability, which a mapped root then has no way to get back. So the
// child waits first, as the stub where there is one (its script: read
// the pipe until end of file, move the config socket to fd 3, execveat
// agentkernel), else as agentkernel itself, which execs itself again
// (initWaitMain).
func forkUnmapped(files []uintptr, sys *syscall.SysProcAttr) (int, *os.File, error) {
	mapsR, mapsW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer mapsR.Close()
	fail := func(err error) (int, *os.File, error) {
		mapsW.Close()
		return 0, nil, err
	}
	if execStub == "" {
		f := append(append([]uintptr{}, files...), mapsR.Fd())
		pid, err := syscall.ForkExec("/proc/self/exe", []string{argv0InitWait}, &syscall.ProcAttr{Env: []string{}, Files: f, Sys: sys})
		if err != nil {
			return fail(err)
		}
		return pid, mapsW, nil
	}
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return fail(err)
	}
	defer exe.Close()
	s := &stubScript{dataOff: stubHeader + 6*stubRecSize}
	k := s.add("waiting for the id maps", unix.SYS_READ, 5, s.bytes(make([]byte, 8)), 8)
	s.recs[k].flags |= stubIgnore
	s.add("config socket", unix.SYS_DUP3, 7, fdConfig, 0)
	s.add("closing", unix.SYS_CLOSE, 7)
	s.add("closing", unix.SYS_CLOSE, 5)
	s.add("starting the init", unix.SYS_EXECVEAT, 6, s.cstr(""), s.strv([]string{argv0Init}), s.strv(nil), unix.AT_EMPTY_PATH)
	b, err := s.encode()
	if err != nil {
		return fail(err)
	}
	scriptR, scriptW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer scriptR.Close()
	// The script fits the pipe's buffer: nobody reads it before the fork.
	_, err = scriptW.Write(b)
	scriptW.Close()
	if err != nil {
		return fail(err)
	}
	// The stub's layout: 3 its script, 4 the error pipe (the init's too),
	// 5 the maps pipe, 6 agentkernel, 7 the config socket (moved to 3).
	f := []uintptr{files[0], files[1], files[2], scriptR.Fd(), files[4], mapsR.Fd(), exe.Fd(), files[3]}
	pid, err := startStub(argv0Init, f, sys)
	if err != nil {
		return fail(err)
	}
	return pid, mapsW, nil
}

// initWaitMain is forkUnmapped's waiting child where no stub exists.
func initWaitMain() int {
	_, _ = io.Copy(io.Discard, os.NewFile(5, "maps"))
	unix.Close(5)
	err := syscall.Exec("/proc/self/exe", []string{argv0Init}, []string{})
	fmt.Fprintln(os.Stderr, "agentkernel: starting the sandbox init:", err)
	return 125
}
