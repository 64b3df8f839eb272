package native

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/testenv"
)

// TestLastCap: the probe agrees with the kernel's own number.
func TestLastCap(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		testenv.Missing(t, "no capability count from the kernel: %v", err)
	}
	want, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if got := lastCap(); got != want {
		t.Fatalf("lastCap() = %d, cap_last_cap says %d", got, want)
	}
}
