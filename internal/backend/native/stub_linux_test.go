package native

import (
	"encoding/binary"
	"slices"
	"testing"
)

// TestStubScriptLayout: a usual exec stage script is compact (data right
// after room for its records, a few KiB); one with more records than
// that room (many volumes, so many Landlock rules) falls back to the
// full layout; both encode with every pointer inside the script.
func TestStubScriptLayout(t *testing.T) {
	if landlockHandled() == 0 {
		t.Skip("no Landlock here: scripts have no rules to grow with")
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
