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
		raw, err := SeccompProfileJSON(profile, caps)
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
	if _, err := SeccompProfileJSON("nonsense", nil); err == nil {
		t.Error("an unknown profile must be refused")
	}
}
