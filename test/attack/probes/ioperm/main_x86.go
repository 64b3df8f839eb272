//go:build linux && (amd64 || 386)

package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func main() {
	e1 := unix.Ioperm(0x80, 1, 1)
	e2 := unix.Iopl(3)
	if e1 == nil || e2 == nil {
		report("allowed", fmt.Sprintf("ioperm: %v, iopl: %v", e1, e2))
	}
	report("blocked", fmt.Sprintf("ioperm: %v; iopl: %v", e1, e2))
}
