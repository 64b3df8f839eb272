package gvisor

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestFreeze: Freeze holds a persistent sandbox still (runsc reports it
// paused, its counter stops), thaw lets it run on; a freeze whose taker
// never thawed is undone by Thaw from another Backend (as the
// supervisor's guard does), Thaw of a sandbox not paused or not there
// does nothing, and a hostile id is refused.
func TestFreeze(t *testing.T) {
	needRunsc(t)
	if idleInit() == nil {
		t.Skip("persistent gvisor sandboxes exist on amd64 only")
	}
	layer := busyboxLayer(t)
	dataDir := t.TempDir()
	dir := filepath.Join(dataDir, "sandboxes", "fz")
	b := New(Options{DataDir: dataDir})
	spec := testSpec(layer)
	spec.ID = "freeze-test"
	spec.Resources = sandbox.Resources{MemoryMB: 256, PIDs: 64}
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inst, err := b.Boot(ctx, spec, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	in := inst.(*Instance)
	defer func() { in.Kill(); in.Close() }()
	if _, ws, err := execOut(t, in, &agent.ExecRequest{Args: []string{"sh", "-c", "(i=0; while :; do i=$((i+1)); echo $i > /tmp/n; done) >/dev/null 2>&1 </dev/null &"}}); err != nil || ws.ExitStatus() != 0 {
		t.Fatalf("the counter: %v %v", ws, err)
	}
	status := func() string {
		out, err := exec.Command(in.r.runsc, "--root", in.r.state(), "state", in.r.id).Output()
		if err != nil {
			t.Fatalf("runsc state: %v", err)
		}
		var st struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(out, &st)
		return st.Status
	}
	count := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "upper", "tmp", "n"))
		return string(b)
	}
	// moved waits until the counter reads as a number other than from.
	moved := func(from string) string {
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if c := count(); c != "" && c != from {
				return c
			}
		}
		return from
	}
	if c := moved(""); c == "" {
		t.Fatal("the counter never ran")
	}

	thaw, err := b.Freeze(spec.ID, dir)
	if err != nil {
		t.Fatal(err)
	}
	if s := status(); s != "paused" {
		t.Fatalf("frozen: runsc says %q", s)
	}
	// (A write cut by the pause may leave the file empty: it stays so.)
	c1 := count()
	time.Sleep(300 * time.Millisecond)
	if c2 := count(); c1 != c2 {
		t.Errorf("the counter moved while frozen: %q then %q", c1, c2)
	}
	if err := thaw(); err != nil {
		t.Fatal(err)
	}
	if s := status(); s != "running" {
		t.Fatalf("thawed: runsc says %q", s)
	}
	if c3 := moved(c1); c3 == c1 {
		t.Errorf("the counter does not move after thaw: %q", c3)
	}

	// A taker that died: the freeze stays until Thaw.
	if _, err := b.Freeze(spec.ID, dir); err != nil {
		t.Fatal(err)
	}
	if err := New(Options{DataDir: dataDir}).Thaw(spec.ID, dir); err != nil {
		t.Fatal(err)
	}
	if s := status(); s != "running" {
		t.Fatalf("after Thaw: runsc says %q", s)
	}
	if err := b.Thaw(spec.ID, dir); err != nil {
		t.Errorf("Thaw of a running sandbox: %v", err)
	}
	if err := b.Thaw(spec.ID, filepath.Join(dataDir, "sandboxes", "none")); err != nil {
		t.Errorf("Thaw of no sandbox: %v", err)
	}
	if _, err := b.Freeze("../x", dir); err == nil {
		t.Error("a hostile id was frozen")
	}
	if _, ws, err := execOut(t, in, &agent.ExecRequest{Args: []string{"true"}}); err != nil || ws.ExitStatus() != 0 {
		t.Errorf("exec after the freezes: %v %v", ws, err)
	}
}
