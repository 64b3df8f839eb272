package native

import (
	"encoding/binary"
	"math/rand"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// runBPF interprets the classic BPF subset assemble emits over one
// seccomp_data, as the kernel would.
func runBPF(t *testing.T, prog []unix.SockFilter, data []byte) uint32 {
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		f := prog[pc]
		switch f.Code {
		case bpfLdAbs:
			acc = binary.LittleEndian.Uint32(data[f.K:])
		case bpfRet:
			return f.K
		case bpfJeq, bpfJgt, bpfJge, bpfJset:
			var ok bool
			switch f.Code {
			case bpfJeq:
				ok = acc == f.K
			case bpfJgt:
				ok = acc > f.K
			case bpfJge:
				ok = acc >= f.K
			case bpfJset:
				ok = acc&f.K != 0
			}
			if ok {
				pc += int(f.Jt)
			} else {
				pc += int(f.Jf)
			}
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, f.Code)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

// decide is what the rules mean: the first rule for nr whose conditions
// all hold, else the default.
func decide(rules []seccompRule, nr uint32, args [6]uint64) uint32 {
	if x32Bit != 0 && nr >= x32Bit {
		return retErrno | uint32(unix.ENOSYS)
	}
	for _, r := range rules {
		if r.nr != nr {
			continue
		}
		ok := true
		for _, c := range r.conds {
			a := args[c.arg]
			switch c.op {
			case opEq:
				ok = ok && a == c.val
			case opNe:
				ok = ok && a != c.val
			case opLt:
				ok = ok && a < c.val
			case opLe:
				ok = ok && a <= c.val
			case opGt:
				ok = ok && a > c.val
			case opGe:
				ok = ok && a >= c.val
			case opAnySet:
				ok = ok && a&c.val != 0
			case opNoneSet:
				ok = ok && a&c.val == 0
			}
		}
		if ok {
			return r.action
		}
	}
	return seccompDefault
}

// TestSeccompProgramMatchesRules runs every assembled profile over every
// syscall number and many argument vectors built from the rules' own
// constants, and compares each verdict with what the rules say.
func TestSeccompProgramMatchesRules(t *testing.T) {
	if auditArch == 0 {
		t.Skip("no seccomp filters on this architecture")
	}
	rng := rand.New(rand.NewSource(1))
	for _, profile := range []string{"default", "default-no-ptrace", "allowlist"} {
		for _, caps := range [][]string{nil, dockerCaps, {"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_BOOT"}} {
			for _, extra := range []bool{false, true} {
				rules, err := seccompRules(profile, caps, extra)
				if err != nil {
					t.Fatal(err)
				}
				prog, err := assemble(rules, seccompDefault)
				if err != nil {
					t.Fatal(err)
				}
				if len(prog) > 300 {
					t.Errorf("%s: %d instructions; the ranges should keep it under 300", profile, len(prog))
				}
				// Interesting values of each argument: the rules' constants,
				// their neighbours, their single bits, and the extremes.
				var vals [6][]uint64
				for i := range vals {
					vals[i] = []uint64{0, 1, ^uint64(0), 1 << 32, 0xffffffff}
				}
				for _, r := range rules {
					for _, c := range r.conds {
						v := c.val
						vals[c.arg] = append(vals[c.arg], v, v+1, v-1, v|1<<40, v&^(v&-v))
						for b := uint64(1); b != 0; b <<= 1 {
							if v&b != 0 {
								vals[c.arg] = append(vals[c.arg], b)
							}
						}
					}
				}
				data := make([]byte, 64)
				binary.LittleEndian.PutUint32(data[offArch:], auditArch)
				checked := 0
				for nr := uint32(0); nr < 1100; nr++ {
					n := 1
					for _, r := range rules {
						if r.nr == nr && len(r.conds) > 0 {
							n = 300
						}
					}
					for k := 0; k < n; k++ {
						var args [6]uint64
						for i := range args {
							args[i] = vals[i][rng.Intn(len(vals[i]))]
							binary.LittleEndian.PutUint64(data[offArgs+8*i:], args[i])
						}
						binary.LittleEndian.PutUint32(data[offNr:], nr)
						if got, want := runBPF(t, prog, data), decide(rules, nr, args); got != want {
							t.Fatalf("%s caps=%v extra=%v: syscall %d args %#x: program says %#x, rules say %#x", profile, caps, extra, nr, args, got, want)
						}
						checked++
					}
				}
				// A foreign architecture is killed whatever the number.
				binary.LittleEndian.PutUint32(data[offArch:], auditArch+1)
				if got := runBPF(t, prog, data); got != retKill {
					t.Fatalf("%s: foreign architecture: %#x, want kill", profile, got)
				}
				t.Logf("%s caps=%d extra=%v: %d instructions, %d verdicts checked", profile, len(caps), extra, len(prog), checked)
			}
		}
	}
}

// TestEarlySeccomp: filterAllows never says "allowed" where the rules
// say otherwise for some arguments, and says it for every syscall the
// rules allow unconditionally; docker's profiles may be loaded early by
// the stub (earlySeccomp), but not with the idmap guards (they look at
// openat's mode), nor the allowlist profile, which lacks capset and
// Landlock.
func TestEarlySeccomp(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, c := range []struct {
		profile string
		extra   bool
		early   bool
	}{{"default", false, true}, {"default", true, false}, {"default-no-ptrace", false, true}, {"allowlist", false, false}} {
		rules, err := seccompRules(c.profile, dockerCaps, c.extra)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := assemble(rules, seccompDefault)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([]byte, 8*len(prog))
		for i, f := range prog {
			binary.NativeEndian.PutUint16(raw[8*i:], f.Code)
			raw[8*i+2], raw[8*i+3] = f.Jt, f.Jf
			binary.NativeEndian.PutUint32(raw[8*i+4:], f.K)
		}
		for nr := uint32(0); nr < 600; nr++ {
			first := slices.IndexFunc(rules, func(r seccompRule) bool { return r.nr == nr })
			uncond := first >= 0 && len(rules[first].conds) == 0 && rules[first].action == retAllow
			got := filterAllows(raw, nr)
			if got != uncond {
				t.Errorf("%s: syscall %d: filterAllows %v, the rules allow it unconditionally: %v", c.profile, nr, got, uncond)
			}
			if !got {
				continue
			}
			for i := 0; i < 50; i++ {
				var args [6]uint64
				for j := range args {
					args[j] = rng.Uint64() >> uint(rng.Intn(64))
				}
				if v := decide(rules, nr, args); v != retAllow {
					t.Fatalf("%s: syscall %d allowed by filterAllows, the rules say %#x for %v", c.profile, nr, v, args)
				}
			}
		}
		if got := earlySeccomp(append([]byte{'F'}, raw...)) != nil; got != c.early {
			t.Errorf("%s (extra %v): loaded early %v, want %v", c.profile, c.extra, got, c.early)
		}
	}
	for _, msg := range [][]byte{nil, {'F'}, []byte("Eno filter"), {'F', 1, 2, 3}} {
		if earlySeccomp(msg) != nil {
			t.Errorf("earlySeccomp(%q) is not nil", msg)
		}
	}
}
