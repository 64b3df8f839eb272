//go:build !(linux && amd64)

package stub

// Binary is empty where no assembled stub exists: agentkernel then
// re-executes itself for every stage.
const Binary = ""
