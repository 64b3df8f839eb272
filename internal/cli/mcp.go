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
stderr. The agent starts this command itself: register it with
'agentkernel plugin install claude|codex|gemini|opencode|mcp'. The
server's working directory is the default project directory (cwd) of
sandbox_run and sandbox_create. The same server is served over streamable
HTTP at /mcp by 'agentkernel serve'.`

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
	s := mcp.NewServer(mcp.Options{
		Manager: m,
		LoadConfig: func(dir string) (*config.Config, error) {
			c, err := a.LoadConfig(dir)
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		Dir:     dir,
		HomeDir: home,
		Version: a.Version.Version,
		Logger:  a.Logger,
		Warn:    a.Warnf,
	})
	a.Infof("agentkernel MCP server started (stdio)")
	if err := mcp.Serve(ctx, s); err != nil && ctx.Err() == nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return nil
}
