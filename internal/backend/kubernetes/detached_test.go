package kubernetes

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestParseDetached: the listing's answer comes from the pod and is
// read as hostile: records with a malformed id or meta are dropped,
// values that do not parse are left out, and a supervisor counts as
// alive only when its /proc entry is the one it recorded and not a
// zombie.
func TestParseDetached(t *testing.T) {
	now := time.Now().UTC()
	meta := func(start time.Time) string {
		b, _ := json.Marshal(detachedMeta{Command: []string{"sleep", "9"}, StartedAt: start})
		return base64.StdEncoding.EncodeToString(b)
	}
	sup := "25 (sh) S 14 25 25 0 -1 4194560 108 0 0 0 0 0 0 0 20 0 1 0 3858485 2322432"
	odd := "25 (a) b) S 14 25 25 0 -1 4194560 108 0 0 0 0 0 0 0 20 0 1 0 3858485 2322432"
	zombie := strings.Replace(sup, " S ", " Z ", 1)
	other := strings.Replace(sup, "3858485", "3858999", 1)
	in := strings.Join([]string{
		"garbage before any record",
		"@ 00000000000000a1", "m " + meta(now.Add(-5*time.Second)), "p 30", "s " + sup, "x " + sup, "c ", "o 11", "e 4",
		"@ 00000000000000a2", "m " + meta(now.Add(-4*time.Second)), "p 31", "s " + sup, "x " + zombie, "c ",
		"@ 00000000000000a3", "m " + meta(now.Add(-3*time.Second)), "p 32", "s " + sup, "x " + other, "c ",
		"@ 00000000000000a4", "m " + meta(now.Add(-2*time.Second)), "p 1", "s " + sup, "x " + sup, "c 137 1", "k", "o 99999999999",
		"@ 00000000000000a5", "m " + meta(now.Add(-1*time.Second)), "p x", "s ", "c ",
		"@ 00000000000000a6", "m " + meta(now), "p 33", "s " + odd, "x " + odd, "c 0 notanumber",
		"@ ../../etc/passwd", "m " + meta(now),
		"@ 00000000000000a7", "m not base64",
		"@ 00000000000000a8", "m " + meta(now.Add(-2*time.Minute)), "s ",
	}, "\n")
	ds := parseDetached(in, now)
	got := map[string]sandbox.DetachedCommand{}
	for _, d := range ds {
		got[d.ID] = d
	}
	if len(ds) != 7 {
		t.Fatalf("%d records: %+v", len(ds), ds)
	}
	check := func(id, status, reason string, code int, pid int) {
		t.Helper()
		d := got[id]
		c := -1
		if d.ExitCode != nil {
			c = *d.ExitCode
		}
		if d.Status != status || d.Reason != reason || c != code || d.Pid != pid {
			t.Errorf("%s: %+v, want %s %q %d pid %d", id, d, status, reason, code, pid)
		}
	}
	check("00000000000000a1", sandbox.DetachedRunning, "", -1, 30)
	check("00000000000000a2", sandbox.DetachedFailed, "supervisor gone", -1, 31)
	check("00000000000000a3", sandbox.DetachedFailed, "supervisor gone", -1, 32)
	check("00000000000000a4", sandbox.DetachedFailed, "killed", 137, 0)
	check("00000000000000a5", sandbox.DetachedRunning, "", -1, 0)
	check("00000000000000a6", sandbox.DetachedRunning, "", -1, 33)
	check("00000000000000a8", sandbox.DetachedFailed, "supervisor gone", -1, 0)
	if d := got["00000000000000a1"]; d.StdoutBytes != 11 || d.StderrBytes != 4 {
		t.Errorf("sizes: %+v", d)
	}
	if d := got["00000000000000a4"]; d.StdoutBytes != sandbox.DetachedLogCap+int64(len(sandbox.DetachedLogMarker)) || !d.FinishedAt.Equal(d.StartedAt) {
		t.Errorf("a file past the cap, a finish before the start: %+v", d)
	}
	for i := 1; i < len(ds); i++ {
		if ds[i].StartedAt.Before(ds[i-1].StartedAt) {
			t.Errorf("not oldest first: %+v", ds)
		}
	}
}
