//go:build linux && !(amd64 || 386)

package main

import (
	"fmt"
	"runtime"
)

// main has nothing to try: ioperm and iopl exist only on x86.
func main() {
	report("blocked", fmt.Sprintf("ioperm and iopl do not exist on %s", runtime.GOARCH))
}
