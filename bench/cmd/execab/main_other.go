//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "execab: persistent sandboxes are Linux only")
	os.Exit(2)
}
