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
