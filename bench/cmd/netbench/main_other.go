//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "netbench: network namespaces are Linux only")
	os.Exit(2)
}
