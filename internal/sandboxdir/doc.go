// Package sandboxdir reads what a persistent sandbox's directory
// (<data-dir>/sandboxes/NAME) offers its clients without the state
// store: the socket of its running agent (sock), the spec it runs with
// (spec.json, written by the supervisor at each start) and the size of
// its writable layer (upper); and the host's totals that 'stats' shows
// (Host). The agentkernel binary's exec, cp, attach and stats use it so
// that they link no SQLite; what it cannot answer (a stopped or unknown
// sandbox) is for the state store to say, in agentkernel-full.
package sandboxdir
