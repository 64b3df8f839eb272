package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/mcp"
)

const mcpServerLong = `Serve the Model Context Protocol over stdin/stdout, so that a coding agent
(Claude Code, Codex, Gemini CLI, OpenCode, Cursor, …) runs commands in
agentkernel sandboxes through tools:

  sandbox_run         run a command in a fresh sandbox (cwd, env, timeout_ms,
                      profile, network, compatibility_mode, image)
  sandbox_create      create and start a persistent sandbox
  sandbox_exec        run a command in a persistent sandbox
  sandbox_file_write  write a file in a persistent sandbox
  sandbox_file_read   read a file from a persistent sandbox
  sandbox_start, sandbox_stop, sandbox_list, sandbox_remove

stdout carries only JSON-RPC messages (one per line); diagnostics go to
stderr. A line that is not a JSON-RPC 2.0 message is answered with a
JSON-RPC error (-32700 not JSON, -32600 not a valid request, longer than
8 MiB, or a batch) and the session goes on; blank lines are skipped. The
agent starts this command itself: register it with 'agentkernel plugin
install claude|codex|gemini|opencode|mcp'. The same server is served over
streamable HTTP at /mcp by 'agentkernel serve'.

The server's working directory is the project directory: the default cwd
of sandbox_run and sandbox_create. A sandbox_run cwd must be that
directory or below it, or a directory listed (with what is below it) in
[mcp] allowed_dirs of the server's own configuration: the agentkernel.toml
of its working directory (or --config) and the user file
(~/.config/agentkernel/config.toml), read when the server starts:

  [mcp]
  allowed_dirs = ["/home/me/shared-libs"]

Paths are compared after resolving symbolic links; "/" is never allowed,
nor is "..". An agentkernel.toml inside a requested cwd is not read: the
server's own configuration, read when it starts, governs every call (a
change to it takes effect when the server restarts); the cwd only chooses
the directory mounted at /workspace and the one image detection reads.`

const mcpServerExample = `  agentkernel mcp-server
  agentkernel mcp server                         # the same
  agentkernel plugin install claude              # register it in .mcp.json
  claude mcp add agentkernel -- agentkernel mcp-server`

func newMCPServerCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:     "mcp-server",
		Short:   "Serve the MCP sandbox tools over stdio (for coding agents)",
		Long:    mcpServerLong,
		Example: mcpServerExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runMCPServer(cmd.Context())
		},
	}
}

// newMCPCmd is "agentkernel mcp" with its "server" subcommand, the
// spelling the skill documents.
func newMCPCmd(a *App) *cobra.Command {
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Model Context Protocol: 'mcp server' is 'mcp-server'",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	srv := newMCPServerCmd(a)
	srv.Use = "server"
	srv.Example = "  agentkernel mcp server"
	c.AddCommand(srv)
	return c
}

func (a *App) runMCPServer(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	m, done, err := a.mcpManager()
	if err != nil {
		return err
	}
	defer done()
	dir, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	// The server's own configuration, read once now, governs every call
	// ([mcp] allowed_dirs included): never a requested cwd's
	// agentkernel.toml. A configuration that does not load makes the
	// tools refuse (NewServer keeps the error), not run on defaults.
	cfg, cfgErr := a.LoadConfig(dir)
	var allowed []string
	if cfgErr != nil {
		a.Warnf("%v (until it is fixed and the server restarted, sandbox_run and sandbox_create refuse)", cfgErr)
	} else {
		allowed = cfg.MCP.AllowedDirs
	}
	s := mcp.NewServer(mcp.Options{
		Manager:     m,
		LoadConfig:  func(string) (*config.Config, error) { return cfg, cfgErr },
		Dir:         dir,
		AllowedDirs: allowed,
		HomeDir:     home,
		DataDir:     a.DataDir,
		Version:     a.Version.Version,
		Logger:      a.Logger,
		Warn:        a.Warnf,
		// The [secrets] bindings of the server's own configuration.
		ServerSecrets: a.serverSecrets,
	})
	a.Infof("agentkernel MCP server started (stdio)")
	if err := mcp.Serve(ctx, s); err != nil && ctx.Err() == nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return nil
}
