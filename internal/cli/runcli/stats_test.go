package runcli

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestWriteStats: what 'stats' prints, in both binaries (one writer):
// a running sandbox's figures, a stopped one's disk only, the host's
// totals; and the same as one JSON object.
func TestWriteStats(t *testing.T) {
	usage := []sandbox.Usage{
		{Name: "dev", Status: sandbox.StatusRunning, CPUPercent: 12.34, CPUSeconds: 1.5, MemoryBytes: 3 << 20, Pids: 4,
			UpperBytes: 2048, SupervisorRSS: 1 << 20, InitRSS: 1 << 19, UptimeSeconds: 9},
		{Name: "a-much-longer-name", Status: sandbox.StatusStopped, UpperBytes: 1000},
	}
	host := sandbox.HostUsage{CPUs: 2, CPUPercent: 7.25, Load1: 0.5, MemoryTotalBytes: 8 << 30, MemoryUsedBytes: 3 << 29,
		DataDirBytes: 5 << 40, DiskFreeBytes: 1536 << 20, Sandboxes: 2, Running: 1}
	var b bytes.Buffer
	if err := WriteStats(&b, usage, host, false); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"NAME                STATUS   CPU%  CPU TIME  MEMORY  PIDS  DISK    SUPERVISOR\n" +
		"dev                 running  12.3  1.50s     3.0MiB  4     2.0KiB  1.5MiB\n" +
		"a-much-longer-name  stopped  -     -         -       -     1000B   -\n" +
		"\nhost: 2 CPUs, 7.2% busy, load 0.50; memory 1.5GiB of 8.0GiB used; data dir 5.0TiB, 1.5GiB free; 2 sandboxes, 1 running\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	if err := WriteStats(&b, usage, host, true); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Sandboxes []sandbox.Usage   `json:"sandboxes"`
		Host      sandbox.HostUsage `json:"host"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(got.Sandboxes) != 2 || got.Sandboxes[0] != usage[0] || got.Sandboxes[1] != usage[1] || got.Host != host {
		t.Errorf("JSON: %s", b.String())
	}
	if !bytes.HasPrefix(b.Bytes(), []byte("{\n  \"sandboxes\": [\n    {\n      \"name\": \"dev\",")) {
		t.Errorf("JSON is not indented as before: %s", b.String())
	}
}

func TestBytesHuman(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 1536: "1.5KiB", 1 << 20: "1.0MiB", 1 << 30: "1.0GiB", 1 << 40: "1.0TiB", 1 << 50: "1024.0TiB"} {
		if got := BytesHuman(n); got != want {
			t.Errorf("BytesHuman(%d) = %q, want %q", n, got, want)
		}
	}
}
