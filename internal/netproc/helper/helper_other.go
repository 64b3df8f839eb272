//go:build !linux

package helper

import (
	"fmt"
	"os"
)

// Main is Linux only.
func Main(confine func() error) int {
	fmt.Fprintln(os.Stderr, "agentkernel network helper: sandbox networking needs Linux")
	return 2
}
