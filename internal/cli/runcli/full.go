package runcli

import "github.com/agentkernel/agentkernel/internal/fullbin"

// FullName is the file name of the binary with the whole command line.
const FullName = fullbin.Name

// FullPath is agentkernel-full's path (fullbin.Path).
func FullPath() (string, error) { return fullbin.Path() }
