//go:build linux && !amd64

package native

// execStub is empty where no assembled exec stage exists: the init then
// re-executes agentkernel as the exec stage (execMain).
const execStub = ""
