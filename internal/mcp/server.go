package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ServerName is serverInfo.name in the initialize answer.
const ServerName = "agentkernel"

// Options configure a Server.
type Options struct {
	// Manager runs ephemeral sandboxes and owns the persistent ones
	// (without a Lifecycle the persistent tools answer isError).
	Manager *sandbox.Manager
	// LoadConfig loads the configuration that applies to a project
	// directory (agentkernel.toml there, the user's, the defaults); nil
	// means config.Defaults.
	LoadConfig func(dir string) (*config.Config, error)
	// Dir is the project directory used when a call names no cwd
	// (default: the process's working directory).
	Dir string
	// HomeDir is the host $HOME (mounted read-only by permissive).
	HomeDir string
	// Version is serverInfo.version.
	Version string
	// Logger receives diagnostics; it must not write to stdout when the
	// server runs over stdio. nil discards them.
	Logger *slog.Logger
	// Warn prints one line for the user (host fallback notices and the
	// like); nil sends them to Logger.
	Warn func(format string, args ...any)
}

// tools is the work behind the tool handlers.
type tools struct {
	opts Options
}

// NewServer returns the MCP server with the nine sandbox tools.
func NewServer(opts Options) *sdk.Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Warn == nil {
		l := opts.Logger
		opts.Warn = func(format string, args ...any) { l.Warn(fmt.Sprintf(format, args...)) }
	}
	if opts.Dir == "" {
		opts.Dir, _ = os.Getwd()
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := sdk.NewServer(&sdk.Implementation{Name: ServerName, Title: "agentkernel sandboxes", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       opts.Logger,
	})
	t := &tools{opts: opts}
	names := t.register(s)
	s.AddReceivingMiddleware(unknownToolAsResult(names))
	return s
}

const instructions = `agentkernel runs commands in isolated sandboxes (own namespaces, overlay root, seccomp, no network egress).
Use sandbox_run for one-off commands (tests, builds, untrusted scripts): the project directory (cwd) is visible at /workspace copy-on-write under the default moderate profile, so the host is never changed.
Use sandbox_create/sandbox_exec/sandbox_file_* for a long-lived environment that keeps its files between calls.`

// unknownToolAsResult answers tools/call for a tool that does not exist
// with an isError result, as the contract asks, instead of the SDK's
// JSON-RPC invalid-params error.
func unknownToolAsResult(names map[string]bool) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method == "tools/call" {
				if r, ok := req.(*sdk.CallToolRequest); ok && r.Params != nil && !names[r.Params.Name] {
					known := make([]string, 0, len(names))
					for n := range names {
						known = append(known, n)
					}
					sort.Strings(known)
					return errorResult(fmt.Sprintf("Unknown tool: %s (tools: %v)", r.Params.Name, known)), nil
				}
			}
			return next(ctx, method, req)
		}
	}
}

// Serve runs the server over stdin/stdout until the client goes away or
// ctx is done. Only protocol messages are written to stdout.
func Serve(ctx context.Context, s *sdk.Server) error {
	in, out := stdio(ctx)
	return s.Run(ctx, &sdk.IOTransport{Reader: in, Writer: out})
}

// Handler serves s over the MCP streamable HTTP transport. Mount it at
// /mcp behind the API's authentication:
//
//	mux.Handle("/mcp", auth(mcp.Handler(mcp.NewServer(opts), logger)))
func Handler(s *sdk.Server, logger *slog.Logger) http.Handler {
	return sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, &sdk.StreamableHTTPOptions{Logger: logger})
}

func textResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

func errorResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "Error: " + text}}}
}
