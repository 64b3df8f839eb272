// Package sandbox owns the vocabulary every other package speaks: the
// resolved Spec of a sandbox, the Backend interface that turns a Spec into
// a running sandbox, and the Manager that the faces (CLI, HTTP API, MCP)
// call. It holds no platform code; backends live under internal/backend.
//
// Persistent sandboxes: the Manager offers one method per operation a face
// exposes (each route of the HTTP API is one call; lifecycle.go) and keeps
// the policy — names, label filters, TTLs, the audit log. The mechanism
// sits behind small interfaces declared here (persistent.go: Store,
// Supervisor, Connector, HostStats, and Conn for one running sandbox),
// implemented by package supervisor, so this package never imports it;
// the face wires them together (ManagerOptions). What the supervisor in
// turn needs of a backend that hosts persistent sandboxes is declared
// here too (backend.go: Booter, Instance, Reclaimer, Meter), so that
// neither this package nor the supervisor imports a backend.
package sandbox
