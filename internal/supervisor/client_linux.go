package supervisor

import "github.com/agentkernel/agentkernel/internal/agent"

// The client side of a sandbox's socket is package agent's (Client,
// SandboxConn), which the agentkernel binary links without this package
// (and its SQLite store); these names keep this package's callers.
type (
	// Client is a connection to one sandbox's supervisor.
	Client = agent.Client
	// RequestError is a failed request as the supervisor reported it.
	RequestError = agent.RequestError
	// Conn adapts a Client to sandbox.Conn.
	Conn = agent.SandboxConn
)

// Dial connects to the supervisor socket at path.
func Dial(path string) (*Client, error) { return agent.Dial(path) }
