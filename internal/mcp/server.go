package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// ServerName is serverInfo.name in the initialize answer.
const ServerName = "agentkernel"

// Options configure a Server.
type Options struct {
	// Manager runs ephemeral sandboxes and owns the persistent ones
	// (without the persistent-sandbox mechanism wired in, the persistent
	// tools answer isError).
	Manager *sandbox.Manager
	// Backend is the backend sandbox_run and sandbox_create use when the
	// call names none ("" or "native": native); one of Manager's.
	Backend string
	// LoadConfig loads the server's configuration: NewServer calls it
	// once, with Dir (agentkernel.toml there or --config, the user's
	// file, the defaults), and that configuration governs every tool
	// call, whatever its cwd: an agentkernel.toml in a requested cwd is
	// never read. When it fails, sandbox_run and sandbox_create answer
	// with its error. nil means config.Defaults.
	LoadConfig func(dir string) (*config.Config, error)
	// Dir is the project directory used when a call names no cwd
	// (default: the process's working directory). A call's cwd must be
	// Dir, a directory below it, or one of AllowedDirs (confine.go); it
	// chooses only the directory mounted at /workspace and the one image
	// detection looks at.
	Dir string
	// AllowedDirs are the other host directories (with what is below
	// them) a call's cwd may name: [mcp] allowed_dirs of the server's own
	// configuration, loaded by the face for Dir. They are resolved once,
	// in NewServer; one that does not exist then is dropped with a
	// warning.
	AllowedDirs []string
	// HomeDir is the host $HOME (mounted read-only by permissive).
	HomeDir string
	// DataDir is agentkernel's data directory, which no call's
	// project directory or volume may hand to a sandbox
	// (policy.Input.DataDir).
	DataDir string
	// Version is serverInfo.version.
	Version string
	// Logger receives diagnostics; it must not write to stdout when the
	// server runs over stdio. nil discards them.
	Logger *slog.Logger
	// Warn prints one line for the user (host fallback notices and the
	// like); nil sends them to Logger.
	Warn func(format string, args ...any)
	// ServerSecrets gives a spec of sandbox_run (persistent false) or
	// sandbox_create (true) the [secrets] bindings of the server's own
	// configuration cfg: the agent names no secret (no tool takes one),
	// so only the server's owner decides which vault key goes to which
	// host. nil: none. Its errors never hold a value.
	ServerSecrets func(ctx context.Context, cfg *config.Config, spec *sandbox.Spec, persistent bool) error
}

// tools is the work behind the tool handlers.
type tools struct {
	opts Options
	// cfg is the server's configuration (Options.LoadConfig for Dir, once);
	// cfgErr is why it could not be loaded.
	cfg    *config.Config
	cfgErr error
	// roots are Dir and AllowedDirs resolved (confine.go); dirReal is
	// Dir resolved.
	roots   []string
	dirReal string

	mu    sync.Mutex
	noted map[string]bool // agentkernel.toml files of cwds already warned about
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
	t := newTools(opts)
	names := t.register(s)
	s.AddReceivingMiddleware(unknownToolAsResult(names))
	return s
}

// newTools loads the server's configuration and resolves the
// directories a call may name, once.
func newTools(opts Options) *tools {
	t := &tools{opts: opts, cfg: config.Defaults()}
	if opts.LoadConfig != nil {
		cfg, err := opts.LoadConfig(opts.Dir)
		switch {
		case err != nil:
			t.cfg, t.cfgErr = nil, err
		case cfg != nil:
			t.cfg = cfg
		}
	}
	t.roots = resolveRoots(opts.Dir, opts.AllowedDirs, opts.Warn)
	t.dirReal, _ = filepath.EvalSymlinks(opts.Dir)
	return t
}

const instructions = `agentkernel runs commands in isolated sandboxes (own namespaces, overlay root, seccomp, a network that reaches only what the policy allows).
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
// ctx is done. Only protocol messages are written to stdout. Lines that
// are not JSON-RPC 2.0 messages are answered with JSON-RPC errors and the
// session goes on (stdio.go).
func Serve(ctx context.Context, s *sdk.Server) error {
	in, out := osStdio(ctx)
	return serveIO(ctx, s, in, out)
}

func serveIO(ctx context.Context, s *sdk.Server, in io.ReadCloser, out io.WriteCloser) error {
	// Vetted messages are re-encoded, which can make one up to twice as
	// long (U+2028 becomes \u2028): the SDK's own bound, whose breach
	// would end the session, stays out of reach.
	return s.Run(ctx, &sdk.IOTransport{Reader: in, Writer: out, MaxLineLength: 3 * MaxMessageBytes})
}

// Handler serves s over the MCP streamable HTTP transport. Mount it at
// /mcp behind the API's authentication:
//
//	mux.Handle("/mcp", auth(mcp.Handler(mcp.NewServer(opts), logger)))
//
// A POST body is vetted as a stdio line is: one that is not JSON is
// answered 400 with a JSON-RPC -32700 Parse error, one that is not a
// JSON-RPC 2.0 message (batches included) 400 with -32600 Invalid
// Request, one over MaxMessageBytes 413 with -32600; the SDK gets the
// others re-encoded.
func Handler(s *sdk.Server, logger *slog.Logger) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s },
		&sdk.StreamableHTTPOptions{Logger: logger, MaxRequestBodyBytes: 3 * MaxMessageBytes})
	return vetBodies(h)
}

// vetBodies checks POST bodies before the SDK reads them.
func vetBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxMessageBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeRPCError(w, http.StatusRequestEntityTooLarge, errorResponse(nil, codeInvalidRequest,
					fmt.Sprintf("Invalid Request: the message is longer than %d bytes", MaxMessageBytes)))
				return
			}
			writeRPCError(w, http.StatusBadRequest, errorResponse(nil, codeParseError, "Parse error: the body could not be read"))
			return
		}
		v := vet(body)
		switch {
		case v.reply != nil:
			writeRPCError(w, http.StatusBadRequest, v.reply)
			return
		case v.msg == nil:
			writeRPCError(w, http.StatusBadRequest, errorResponse(nil, codeParseError, "Parse error: the body is empty"))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(v.msg))
		r.ContentLength = int64(len(v.msg))
		r.Header.Set("Content-Length", strconv.Itoa(len(v.msg)))
		next.ServeHTTP(w, r)
	})
}

func writeRPCError(w http.ResponseWriter, status int, msg []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(msg, '\n'))
}

func textResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

func errorResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "Error: " + text}}}
}
