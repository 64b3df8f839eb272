// Package stub holds agentkernel's assembled stub (execstub_amd64.S, a
// few KiB with no runtime: it runs a script of system calls it reads
// from fd 3) and starts it. The native backend runs a sandbox's exec
// stage and, when it builds the sandbox on a thread, its PID 1 as this
// stub. The package imports only syscall (the stub is a string constant,
// not go:embed, whose imports would be initialised first), so package
// prestart can start the stub while agentkernel is still starting up.
package stub

// Argv0Init is the argv[0] of a sandbox's PID 1 (the stub, or
// agentkernel re-executed as the init).
const Argv0Init = "agentkernel:init"
