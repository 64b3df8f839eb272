// Package nomadlab runs a real Nomad agent (`nomad agent -dev`, server
// and client in one process) on loopback ports of its own, with its own
// data directory and raw_exec enabled, for the nomad backend's tests.
// The agent is built by scripts/nomad.sh for tests only (Nomad is not
// open source): nothing here links it.
package nomadlab
