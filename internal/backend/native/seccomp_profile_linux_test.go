package native

import (
	"encoding/json"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// allowedByJSON reports whether the docker-format profile allows name
// unconditionally.
func allowedByJSON(p *specs.LinuxSeccomp, name string) bool {
	for _, sc := range p.Syscalls {
		if sc.Action == specs.ActAllow && len(sc.Args) == 0 && slices.Contains(sc.Names, name) {
			return true
		}
	}
	return false
}

// TestSeccompProfileJSON holds the docker-format profiles to the rules
// the native filter is compiled from: what a native sandbox of a profile
// may call outright, a container given the JSON may, and nothing else.
func TestSeccompProfileJSON(t *testing.T) {
	caps := []string{"CAP_CHOWN", "CAP_SETUID"}
	for _, profile := range []string{"default", "default-no-ptrace", "allowlist"} {
		raw, err := SeccompProfileJSON(profile, caps, false)
		if err != nil {
			t.Fatal(err)
		}
		var p specs.LinuxSeccomp
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		if p.DefaultAction != specs.ActErrno || len(p.Architectures) == 0 {
			t.Errorf("%s: default %s, architectures %v", profile, p.DefaultAction, p.Architectures)
		}
		rules, err := seccompRules(profile, caps, false)
		if err != nil {
			t.Fatal(err)
		}
		native := map[uint32]bool{}
		for _, r := range rules {
			if r.action == retAllow && len(r.conds) == 0 {
				native[r.nr] = true
			}
		}
		for _, e := range syscallTable {
			if got, want := allowedByJSON(&p, e.name), native[e.nr]; got != want {
				t.Errorf("%s: %s allowed outright: JSON %v, native %v", profile, e.name, got, want)
			}
		}
	}
	if _, err := SeccompProfileJSON("nonsense", nil, false); err == nil {
		t.Error("an unknown profile must be refused")
	}
}

// TestGuardSetid: with the guard no profile allows a mode setter, an
// xattr setter or openat2 outright; each mode setter is allowed only
// with neither set-id bit and refused with either; the rest of the
// profile is as it was.
func TestGuardSetid(t *testing.T) {
	for _, profile := range []string{"default", "default-no-ptrace", "allowlist", "guard-only"} {
		var p specs.LinuxSeccomp
		if profile == "guard-only" {
			p = *SetidGuardProfile()
		} else {
			raw, err := SeccompProfileJSON(profile, nil, true)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range append([]string{"openat2"}, xattrSetters...) {
			if allowedByJSON(&p, n) {
				t.Errorf("%s: %s is allowed outright", profile, n)
			}
		}
		for n, i := range setidModeArg {
			if allowedByJSON(&p, n) {
				t.Errorf("%s: %s is allowed outright", profile, n)
			}
			var allow, refuse int
			for _, sc := range p.Syscalls {
				if !slices.Contains(sc.Names, n) || len(sc.Args) != 1 || sc.Args[0].Index != i || sc.Args[0].Op != specs.OpMaskedEqual {
					continue
				}
				a := sc.Args[0]
				switch {
				case sc.Action == specs.ActAllow && a.Value == setidBits && a.ValueTwo == 0:
					allow++
				case sc.Action == specs.ActErrno && a.Value&setidBits != 0 && a.Value == a.ValueTwo:
					refuse++
				}
			}
			if allow != 1 || refuse != 2 {
				t.Errorf("%s: %s has %d allowing and %d refusing rules on its mode, want 1 and 2", profile, n, allow, refuse)
			}
		}
		if profile != "guard-only" && !allowedByJSON(&p, "read") {
			t.Errorf("%s: the guard took read away", profile)
		}
	}
}
