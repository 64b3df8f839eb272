package native

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// SeccompProfileJSON is the seccomp filter a sandbox with the given
// profile and capabilities gets here, written as a profile in docker's
// JSON format (what `docker run --security-opt seccomp=FILE` and podman
// read), resolved for this host: every rule's capability, architecture
// and kernel conditions already applied, so the runtime that reads it
// builds the filter from the same rules this backend compiles. For
// backends that hand the filter to another runtime (docker, podman).
//
// guardSetid adds GuardSetid's rules: for a sandbox that writes a host
// directory whose files the host sees as its owner's.
func SeccompProfileJSON(profile string, caps []string, guardSetid bool) ([]byte, error) {
	var prof *specs.LinuxSeccomp
	switch profile {
	case "default", "default-no-ptrace":
		full := make([]string, 0, len(caps))
		for _, c := range caps {
			if len(c) < 4 || c[:4] != "CAP_" {
				c = "CAP_" + c
			}
			full = append(full, c)
		}
		p, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: full}}})
		if err != nil {
			return nil, err
		}
		if profile == "default-no-ptrace" {
			kept := p.Syscalls[:0]
			for _, sc := range p.Syscalls {
				if sc.Action == specs.ActAllow {
					sc.Names = slices.DeleteFunc(slices.Clone(sc.Names), func(n string) bool { return slices.Contains(noPtraceSyscalls, n) })
					if len(sc.Names) == 0 {
						continue
					}
				}
				kept = append(kept, sc)
			}
			p.Syscalls = kept
		}
		prof = p
	case "allowlist":
		p, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
		if err != nil {
			return nil, err
		}
		eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
		prof = &specs.LinuxSeccomp{
			DefaultAction:   specs.ActErrno,
			DefaultErrnoRet: &eperm,
			Architectures:   p.Architectures,
		}
		rule := func(name string, act specs.LinuxSeccompAction, args ...specs.LinuxSeccompArg) {
			prof.Syscalls = append(prof.Syscalls, specs.LinuxSyscall{Names: []string{name}, Action: act, Args: args})
		}
		// The rules of allowlistRules, one comparison per rule (a
		// runtime's libseccomp takes one per argument).
		prof.Syscalls = append(prof.Syscalls, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys})
		prof.Syscalls = append(prof.Syscalls, specs.LinuxSyscall{Names: slices.Clone(allowlistSyscalls), Action: specs.ActAllow})
		rule("clone", specs.ActAllow, specs.LinuxSeccompArg{Index: 0, Value: nsFlags, ValueTwo: 0, Op: specs.OpMaskedEqual})
		rule("socket", specs.ActAllow, specs.LinuxSeccompArg{Index: 0, Value: unix.AF_NETLINK, Op: specs.OpLessThan})
		rule("socket", specs.ActAllow, specs.LinuxSeccompArg{Index: 0, Value: unix.AF_PACKET, Op: specs.OpGreaterThan})
		rule("personality", specs.ActAllow, specs.LinuxSeccompArg{Index: 0, Value: 0, Op: specs.OpEqualTo})
		rule("personality", specs.ActAllow, specs.LinuxSeccompArg{Index: 0, Value: 0xffffffff, Op: specs.OpEqualTo})
	default:
		return nil, fmt.Errorf("unknown seccomp profile %q", profile)
	}
	if guardSetid {
		GuardSetid(prof)
	}
	return json.Marshal(prof)
}

// setidModeArg is, for each system call that sets a file's mode, the
// index of its mode argument (idmapGuards' table).
var setidModeArg = map[string]uint{
	"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3,
	"creat": 1, "mknod": 1, "mknodat": 2,
}

// xattrSetters are the system calls that set extended attributes (file
// capabilities among them).
var xattrSetters = []string{"setxattr", "lsetxattr", "fsetxattr", "setxattrat"}

// GuardSetid makes prof refuse what idmapGuards refuses where a sandbox
// writes a host directory as host root's or its owner's: a mode with
// S_ISUID or S_ISGID in chmod, fchmod, fchmodat(2), open, openat, creat
// and mknod(at) (EPERM), every extended attribute's setter (EPERM: file
// capabilities), and openat2 (ENOSYS: its mode is in a structure a
// filter cannot read; libc falls back to openat). It holds whatever
// prof's default action: the guarded calls leave every other rule and
// get explicit ones, an allow where the mode has neither bit and EPERM
// for each bit.
func GuardSetid(prof *specs.LinuxSeccomp) {
	guarded := func(n string) bool {
		_, ok := setidModeArg[n]
		return ok || n == "openat2" || slices.Contains(xattrSetters, n)
	}
	kept := prof.Syscalls[:0]
	for _, sc := range prof.Syscalls {
		sc.Names = slices.DeleteFunc(slices.Clone(sc.Names), guarded)
		if len(sc.Names) > 0 {
			kept = append(kept, sc)
		}
	}
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	var guard []specs.LinuxSyscall
	names := make([]string, 0, len(setidModeArg))
	for n := range setidModeArg {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		i := setidModeArg[n]
		guard = append(guard,
			specs.LinuxSyscall{Names: []string{n}, Action: specs.ActAllow,
				Args: []specs.LinuxSeccompArg{{Index: i, Value: setidBits, ValueTwo: 0, Op: specs.OpMaskedEqual}}},
			specs.LinuxSyscall{Names: []string{n}, Action: specs.ActErrno, ErrnoRet: &eperm,
				Args: []specs.LinuxSeccompArg{{Index: i, Value: unix.S_ISUID, ValueTwo: unix.S_ISUID, Op: specs.OpMaskedEqual}}},
			specs.LinuxSyscall{Names: []string{n}, Action: specs.ActErrno, ErrnoRet: &eperm,
				Args: []specs.LinuxSeccompArg{{Index: i, Value: unix.S_ISGID, ValueTwo: unix.S_ISGID, Op: specs.OpMaskedEqual}}})
	}
	guard = append(guard,
		specs.LinuxSyscall{Names: slices.Clone(xattrSetters), Action: specs.ActErrno, ErrnoRet: &eperm},
		specs.LinuxSyscall{Names: []string{"openat2"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	prof.Syscalls = append(guard, kept...)
}

// SetidGuardProfile is a filter that allows everything but what
// GuardSetid refuses: for a runtime whose sandbox has no other filter of
// agentkernel's (gVisor's Sentry) or none asked for (unconfined).
func SetidGuardProfile() *specs.LinuxSeccomp {
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActAllow}
	GuardSetid(p)
	return p
}

// SetidGuardJSON is SetidGuardProfile in docker's JSON format.
func SetidGuardJSON() ([]byte, error) { return json.Marshal(SetidGuardProfile()) }
