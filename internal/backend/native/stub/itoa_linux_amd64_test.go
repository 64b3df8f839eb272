package stub

import (
	"strconv"
	"testing"
)

// A stub may get ten descriptors or more (a v1 host with many
// hierarchies to join): its binary's path must name the right one.
func TestItoa(t *testing.T) {
	for _, n := range []int{0, 5, 9, 10, 11, 99, 100, 1234} {
		if got := itoa(n); got != strconv.Itoa(n) {
			t.Errorf("itoa(%d) = %q", n, got)
		}
	}
}
