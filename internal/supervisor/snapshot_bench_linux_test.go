package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/image/cache"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/testenv"
)

// BenchmarkSnapshotRestore times the restore of a snapshot of a sandbox
// whose writable layer holds 10 MB, 1 GB and 5 GB of files (1 MiB
// each): a restore is one record in the state store, so its time must
// not grow with the size. The 5 GB case is skipped where the data
// directory's file system has less than twice that free. The take of
// the stopped sandbox (a rename and the owners' walk) happens in the
// set-up, outside the timing.
func BenchmarkSnapshotRestore(b *testing.B) {
	testenv.RequireRoot(b)
	for _, size := range []struct {
		name string
		mib  int
	}{{"10MB", 10}, {"1GB", 1024}, {"5GB", 5120}} {
		b.Run(size.name, func(b *testing.B) {
			ctx := context.Background()
			m := &Manager{DataDir: b.TempDir()}
			defer m.Close()
			var fs unix.Statfs_t
			if err := unix.Statfs(m.DataDir, &fs); err != nil {
				b.Fatal(err)
			}
			if free := int64(fs.Bavail) * int64(fs.Bsize); free < 2*int64(size.mib)<<20 {
				b.Skipf("%d MiB free on the data directory's file system: too little for %s", free>>20, size.name)
			}
			spec := &sandbox.Spec{Image: "busybox", Rootfs: cache.Rootfs{Layers: []string{b.TempDir()}, IDMap: cache.IDMap{Size: 65536}}}
			if err := m.Create(ctx, &sandbox.Info{Name: "src", Backend: "native"}, spec); err != nil {
				b.Fatal(err)
			}
			fillLayer(b, filepath.Join(m.Dir("src"), "upper"), size.mib)
			if err := os.WriteFile(filepath.Join(m.Dir("src"), "idrange"), []byte("524288\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			if _, err := m.TakeSnapshot(ctx, "src", "snap"); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				name := "r" + strconv.Itoa(i)
				if _, err := m.RestoreSnapshot(ctx, "snap", name); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := m.Remove(ctx, name, false); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// fillLayer writes mib files of 1 MiB into dir, owned by a user of the
// sandbox's block of host ids, in directories of 64.
func fillLayer(b *testing.B, dir string, mib int) {
	b.Helper()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for i := 0; i < mib; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%03d", i/64))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		p := filepath.Join(d, fmt.Sprintf("f%04d", i))
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.Lchown(p, testBase+1000, testBase+1000); err != nil {
			b.Fatal(err)
		}
	}
}
