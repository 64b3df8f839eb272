package sandboxdir

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestHost: the machine's totals are read (CPUs, memory), the data
// directory's disk use counts a hard-linked file once, and a cancelled
// context ends the CPU sample.
func TestHost(t *testing.T) {
	dd := t.TempDir()
	big := make([]byte, 256<<10)
	for i := range big {
		big[i] = byte(i)
	}
	if err := os.WriteFile(filepath.Join(dd, "a"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := Host(context.Background(), dd)
	if err != nil {
		t.Fatal(err)
	}
	if h.CPUs < 1 || h.MemoryTotalBytes <= 0 || h.MemoryUsedBytes <= 0 || h.MemoryUsedBytes > h.MemoryTotalBytes ||
		h.CPUPercent < 0 || h.CPUPercent > 100 || h.DiskFreeBytes <= 0 || h.DataDirBytes < int64(len(big)) {
		t.Fatalf("host: %+v", h)
	}
	if err := os.Link(filepath.Join(dd, "a"), filepath.Join(dd, "b")); err != nil {
		t.Fatal(err)
	}
	if h2, err := Host(context.Background(), dd); err != nil || h2.DataDirBytes != h.DataDirBytes {
		t.Errorf("a hard link changed the data dir's use from %d to %d (%v)", h.DataDirBytes, h2.DataDirBytes, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Host(ctx, dd); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if h, _ := Host(context.Background(), filepath.Join(dd, "missing")); h.DataDirBytes != 0 || h.DiskFreeBytes != 0 {
		t.Errorf("a missing data dir: %+v", h)
	}
}

// TestWritableBytes: the apparent size of the files under the sandbox's
// upper directory and its copy-on-write volumes' (cow<i>/upper), none
// of the rest of its directory (a volume's work directory included);
// none without them.
func TestWritableBytes(t *testing.T) {
	dir := t.TempDir()
	if n := WritableBytes(dir); n != 0 {
		t.Errorf("no upper: %d", n)
	}
	for _, d := range []string{"upper/x", "cow0/upper", "cow0/work/w", "cow12/upper/y"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for p, n := range map[string]int{"upper/f": 10, "upper/x/g": 5000, "other": 1 << 20, "cow0/upper/h": 300, "cow0/work/w/i": 1 << 20, "cow12/upper/y/j": 7, "cowboy": 1 << 20} {
		if err := os.WriteFile(filepath.Join(dir, p), make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if n := WritableBytes(dir); n != 5317 {
		t.Errorf("writable layers: %d, want 5317", n)
	}
}
