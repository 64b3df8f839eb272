// Package mcp is the Model Context Protocol face of agentkernel: the nine
// sandbox_* tools over the official Go SDK
// (github.com/modelcontextprotocol/go-sdk). Like the CLI it is thin: it
// turns tool arguments into a policy.Resolve input or a sandbox.Manager
// call and renders the outcome as text content.
//
// NewServer builds the server; Serve runs it over stdio (the
// `agentkernel mcp-server` command) and Handler serves it over the SDK's
// streamable HTTP transport (mounted at /mcp by `agentkernel serve`).
// Every call is governed by the server's own configuration, loaded once
// by NewServer; a call's cwd chooses only the directory mounted at
// /workspace and the one image detection reads, within the directories
// confine.go allows.
//
// Tool failures (bad arguments, an unknown tool, a command that exits
// non-zero, a sandbox that does not exist) are results with isError set,
// never JSON-RPC errors; unknown methods are answered -32601 by the SDK.
package mcp
