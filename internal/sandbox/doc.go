// Package sandbox owns the vocabulary every other package speaks: the
// resolved Spec of a sandbox, the Backend interface that turns a Spec into
// a running sandbox, and the Manager that the faces (CLI, HTTP API, MCP)
// call. It holds no platform code; backends live under internal/backend.
package sandbox
