package native

import (
	"errors"
	"os"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// BenchmarkCgroupNewDestroy is one run's cgroup: made with the moderate
// profile's three limits, then removed.
func BenchmarkCgroupNewDestroy(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	r := sandbox.Resources{MemoryMB: 512, PIDs: 256, CPUPercent: 100}
	for i := 0; i < b.N; i++ {
		cg, err := newCgroup("bench-"+randomID(), r, false)
		if errors.Is(err, errNoCgroups) {
			b.Skip(err)
		}
		if err != nil {
			b.Fatal(err)
		}
		if err := cg.destroy(); err != nil {
			b.Fatal(err)
		}
	}
}
