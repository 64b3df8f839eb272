package native

import (
	"encoding/binary"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestStubScriptLayout: a usual exec stage script is compact (data right
// after room for its records, a few KiB); one with more records than
// that room (many volumes, so many Landlock rules) falls back to the
// full layout; both encode with every pointer inside the script.
func TestStubScriptLayout(t *testing.T) {
	if landlockHandled() == 0 {
		testenv.Missing(t, "no Landlock here: scripts have no rules to grow with")
	}
	base := execConfig{Args: []string{"/bin/true"}, Env: []string{"PATH=/bin"}, Workdir: "/", Landlock: true, NoFile: 1024}
	for _, c := range []struct {
		volumes int
		compact bool
	}{{0, true}, {2, true}, {60, false}} {
		cfg := base
		cfg.LandlockRW = slices.Repeat([]string{"/tmp"}, c.volumes)
		s, err := buildStubScript(&cfg, "/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.encode()
		if err != nil {
			t.Fatalf("%d volumes: %v", c.volumes, err)
		}
		if got := s.dataOff == stubCompactOff; got != c.compact {
			t.Errorf("%d volumes: %d records, compact layout %v, want %v", c.volumes, len(s.recs), got, c.compact)
		}
		if c.compact && len(b) > 16<<10 {
			t.Errorf("%d volumes: compact script of %d bytes", c.volumes, len(b))
		}
		if n := binary.LittleEndian.Uint64(b); n != uint64(len(b)) || binary.LittleEndian.Uint64(b[8:]) != uint64(len(s.recs)) {
			t.Errorf("%d volumes: header says %d bytes, %d records", c.volumes, n, binary.LittleEndian.Uint64(b[8:]))
		}
		if stubHeader+stubRecSize*len(s.recs) > s.off() {
			t.Errorf("%d volumes: records overlap the data", c.volumes)
		}
	}
}

// TestStubPreparedSplit: a prepared sandbox's set-up script ends by
// reporting done and waiting for the next script; the rest takes the
// stdio and loads the seccomp filter, and never repeats a set-up step.
func TestStubPreparedSplit(t *testing.T) {
	cfg := execConfig{Args: []string{"/bin/true"}, Workdir: "/", Landlock: true, NoFile: 1024, Filter: make([]byte, 8*4)}
	setup, rest, err := buildStubPrepared(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	n := len(setup.recs)
	if n < 3 || setup.recs[n-1].nr != stubChain || setup.recs[n-2].desc != "reporting set-up done" {
		t.Fatalf("set-up script does not end in report + chain: %+v", setup.recs[max(0, n-2):])
	}
	descs := func(s *stubScript) map[string]bool {
		m := map[string]bool{}
		for _, r := range s.recs {
			m[r.desc] = true
		}
		return m
	}
	sd, rd := descs(setup), descs(rest)
	for _, want := range []string{"no_new_privs", "workdir /", "RLIMIT_NOFILE"} {
		if !sd[want] || rd[want] {
			t.Errorf("%q: in set-up %v, in rest %v", want, sd[want], rd[want])
		}
	}
	for _, want := range []string{"receiving stdio", "loading seccomp filter"} {
		if sd[want] || !rd[want] {
			t.Errorf("%q: in set-up %v, in rest %v", want, sd[want], rd[want])
		}
	}
	addStubExec(rest, &cfg, "/bin/true")
	for _, s := range []*stubScript{setup, rest} {
		if _, err := s.encode(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStubLateSyscalls: every system call a stub script makes after an
// early seccomp load (the rest of the first script, then the last one
// with each optional step switched on) is in stubLateSyscalls, which
// earlySeccomp checks the filter against.
func TestStubLateSyscalls(t *testing.T) {
	late := map[uint64]bool{}
	for _, nr := range stubLateSyscalls {
		late[uint64(nr)] = true
	}
	check := func(name string, recs []stubRecord) {
		for _, r := range recs {
			if r.nr == stubPoke || r.nr == stubChain {
				continue
			}
			if !late[r.nr] {
				t.Errorf("%s: %q makes syscall %d, not in stubLateSyscalls", name, r.desc, r.nr)
			}
		}
	}
	filter := make([]byte, 8*4)
	enter := stubEnterScript(true, 3, filter)
	at := slices.IndexFunc(enter.recs, func(r stubRecord) bool { return r.nr == unix.SYS_SECCOMP })
	if at < 0 || enter.recs[at-1].nr != unix.SYS_UNSHARE {
		t.Fatalf("the first script does not load the filter right after entering its namespaces: %+v", enter.recs)
	}
	check("first script", enter.recs[at+1:])
	if slices.ContainsFunc(stubEnterScript(true, 3, nil).recs, func(r stubRecord) bool { return r.nr == unix.SYS_SECCOMP }) {
		t.Error("a first script without a filter loads one")
	}
	cfg := execConfig{Args: []string{"/bin/true"}, Workdir: "/", Landlock: true, NoFile: 1024,
		Groups: []int{1, 2}, RecvStdio: true, LandlockRW: []string{"/tmp"}, Filter: filter, filterLoaded: true}
	s, err := buildStubPrefixAt(&cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	addStubExec(s, &cfg, "/bin/true")
	if slices.ContainsFunc(s.recs, func(r stubRecord) bool { return r.nr == unix.SYS_SECCOMP }) {
		t.Error("the last script loads a filter the first one loaded")
	}
	check("last script", s.recs)
	cfg.filterLoaded = false
	s, _ = buildStubPrefixAt(&cfg, 0)
	if !slices.ContainsFunc(s.recs, func(r stubRecord) bool { return r.nr == unix.SYS_SECCOMP }) {
		t.Error("the last script does not load the filter when the first did not")
	}
}

// TestStubErrorNamesCapability: a failed bounding-set drop is reported
// with the capability's number, which the record's description leaves
// out.
func TestStubErrorNamesCapability(t *testing.T) {
	cfg := execConfig{Args: []string{"/bin/true"}, Workdir: "/", Caps: []string{"CAP_CHOWN"}}
	s, err := buildStubPrefixAt(&cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	idx := slices.IndexFunc(s.recs, func(r stubRecord) bool {
		return r.desc == descCapDrop && r.args[1] == unix.CAP_SYS_ADMIN
	})
	if idx < 0 {
		t.Fatal("no drop of CAP_SYS_ADMIN in the script")
	}
	report := make([]byte, 16)
	binary.LittleEndian.PutUint64(report, uint64(idx))
	binary.LittleEndian.PutUint64(report[8:], uint64(unix.EPERM))
	want := stageFailure{Errno: unix.EPERM, Msg: "dropping capability 21 from the bounding set: operation not permitted"}
	if got := stubError(s, report); *got != want {
		t.Errorf("stubError = %+v, want %+v", *got, want)
	}
}
