package cli

// SuperviseArgv0 is the argv[0] by which 'sandbox start' runs a
// supervisor: main hands such a process to SuperviseMain before it builds
// the command line, so that a sandbox's long-lived supervisor holds none
// of the CLI's memory.
const SuperviseArgv0 = "agentkernel:supervise"
