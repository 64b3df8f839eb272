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
func SeccompProfileJSON(profile string, caps []string) ([]byte, error) {
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
	return json.Marshal(prof)
}
