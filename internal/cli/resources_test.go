package cli

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

func TestWriteResources(t *testing.T) {
	var b bytes.Buffer
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	writeResources(w, sandbox.Resources{CPUPercent: 150, MemoryMB: 512, DiskMB: 64, Timeout: 90 * time.Second})
	w.Flush()
	for _, want := range []string{"CPU:", "1.5 cores", "Memory:", "512 MiB", "Processes:", "no limit", "64 MiB each", "1m30s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "{") {
		t.Errorf("raw JSON in:\n%s", b.String())
	}
}
