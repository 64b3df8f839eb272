package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/fullbin"
	"github.com/agentkernel/agentkernel/internal/plugin"
)

const pluginLong = `Install agentkernel into coding agents, so that the commands they run go
through sandboxes. Each target writes what its agent reads today:

  claude    .mcp.json mcpServers.agentkernel (--global: ~/.claude.json),
            a skill .claude/skills/agentkernel/SKILL.md that teaches when and
            how to sandbox, and a /sandbox command .claude/commands/sandbox.md
  codex     [mcp_servers.agentkernel] in ~/.codex/config.toml ($CODEX_HOME),
            or in the project's .codex/config.toml when that directory exists
  gemini    .gemini/settings.json mcpServers.agentkernel (--global: ~/.gemini)
  opencode  .opencode/plugins/agentkernel.ts, a plugin that calls the HTTP API
            of 'agentkernel serve' (AGENTKERNEL_BASE_URL, default
            http://127.0.0.1:18888), plus its dependency in .opencode/package.json
            (--global: ~/.config/opencode)
  mcp       print the generic MCP server JSON for any other client
  all       every target above

Existing files are merged, never clobbered: other MCP servers, settings and
(in TOML) comments stay as they are; invalid JSON or TOML is refused. A
target is installed all or nothing: every file is read and checked before
any is written, and a write that fails puts back the files written before
it. The first change to an existing file keeps a copy in FILE.bak; files
are replaced atomically. Installing again changes nothing ("already
installed"); --force replaces an agentkernel entry or file that differs;
--dry-run prints what would change and writes nothing.`

const pluginExample = `  agentkernel plugin install claude              # this project
  agentkernel plugin install codex --global
  agentkernel plugin install all --dry-run
  agentkernel plugin install gemini --force       # overwrite our entry
  agentkernel plugin install mcp                  # print the JSON snippet
  agentkernel plugin list`

func newPluginCmd(a *App) *cobra.Command {
	c := &cobra.Command{
		Use:     "plugin",
		Aliases: []string{"plugins"},
		Short:   "Install agentkernel into Claude Code, Codex, Gemini CLI and OpenCode",
		Long:    pluginLong,
		Example: pluginExample,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	c.AddCommand(newPluginInstallCmd(a), newPluginListCmd(a))
	return c
}

func pluginOptions() (plugin.Options, error) {
	dir, err := os.Getwd()
	if err != nil {
		return plugin.Options{}, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return plugin.Options{}, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("home directory: %w", err)}
	}
	return plugin.Options{ProjectDir: dir, HomeDir: home, Command: agentCommand()}, nil
}

// agentCommand is how agents should start us: "agentkernel" when that
// name on PATH is this binary, else this binary's absolute path.
func agentCommand() string {
	self, err := os.Executable()
	if err != nil {
		return "agentkernel"
	}
	// This is agentkernel-full; agents are given the agentkernel beside
	// it, the command users know.
	if front := filepath.Join(filepath.Dir(self), "agentkernel"); filepath.Base(self) == fullbin.Name {
		if st, err := os.Stat(front); err == nil && st.Mode().IsRegular() {
			self = front
		}
	}
	if p, err := exec.LookPath("agentkernel"); err == nil {
		a, _ := filepath.EvalSymlinks(p)
		b, _ := filepath.EvalSymlinks(self)
		if a == b {
			return "agentkernel"
		}
	}
	return self
}

var pluginNextSteps = map[string]string{
	"claude":   "restart Claude Code in this project and approve the agentkernel MCP server (/mcp shows it); try /sandbox npm test",
	"codex":    "restart Codex; 'codex mcp list' shows agentkernel",
	"gemini":   "restart Gemini CLI; /mcp shows agentkernel",
	"opencode": "start the API with 'agentkernel serve', export AGENTKERNEL_API_KEY=\"$(cat <data-dir>/api-key)\" (serve prints the path) where OpenCode runs, then restart OpenCode (it installs @opencode-ai/plugin itself)",
}

func newPluginInstallCmd(a *App) *cobra.Command {
	var global, force, dryRun bool
	cmd := &cobra.Command{
		Use:       "install claude|codex|gemini|opencode|mcp|all",
		Short:     "Register the MCP server and write the agent's skill, command or plugin",
		Long:      pluginLong,
		Example:   pluginExample,
		Args:      cobra.ExactArgs(1),
		ValidArgs: append(append([]string{}, plugin.Targets...), "all"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := pluginOptions()
			if err != nil {
				return err
			}
			o.Global, o.Force, o.DryRun = global, force, dryRun
			targets := []string{args[0]}
			if args[0] == "all" {
				targets = plugin.Targets
			}
			return a.pluginInstall(targets, o)
		},
	}
	fs := cmd.Flags()
	fs.BoolVarP(&global, "global", "g", false, "write the user-level configuration (in $HOME) instead of the project's")
	fs.BoolVarP(&force, "force", "f", false, "replace an existing agentkernel entry or file that differs")
	fs.BoolVarP(&dryRun, "dry-run", "n", false, "print what would change; write nothing")
	return cmd
}

func (a *App) pluginInstall(targets []string, o plugin.Options) error {
	var failed []string
	for _, t := range targets {
		changes, err := plugin.Install(t, o)
		if errors.Is(err, plugin.ErrUnknownTarget) {
			return usageError("%v", err)
		}
		if t == "mcp" {
			fmt.Fprintf(a.Stdout, "mcp: add this to your MCP client's configuration:\n%s", changes[0].Diff)
			continue
		}
		head := t
		if o.DryRun {
			head += " (dry run: nothing written)"
		}
		fmt.Fprintf(a.Stdout, "%s:\n", head)
		changed := false
		for _, c := range changes {
			what := string(c.Action)
			if o.DryRun && c.Action != plugin.Unchanged && c.Action != plugin.Skipped {
				what = "would be " + what
			}
			if c.Action == plugin.Skipped {
				what += ": " + c.Detail
			}
			fmt.Fprintf(a.Stdout, "  %s %s (%s)\n", c.Marker(), c.Path, what)
			if o.DryRun && c.Diff != "" {
				for _, l := range strings.Split(c.Diff, "\n") {
					fmt.Fprintf(a.Stdout, "      %s\n", l)
				}
			}
			if c.Backup != "" {
				fmt.Fprintf(a.Stdout, "      backup: %s\n", c.Backup)
			}
			if c.Action != plugin.Unchanged && c.Action != plugin.Skipped {
				changed = true
			}
		}
		if err != nil {
			fmt.Fprintf(a.Stdout, "  ! %v\n", err)
			failed = append(failed, t)
			continue
		}
		if changed && !o.DryRun {
			fmt.Fprintf(a.Stdout, "  next: %s\n", pluginNextSteps[t])
		}
	}
	if len(failed) > 0 {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("plugin install %s failed; no file of a failed target was written", strings.Join(failed, ", "))}
	}
	return nil
}

func newPluginListCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "status"},
		Short:   "Show which agents have agentkernel installed, in this project and globally",
		Example: "  agentkernel plugin list",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := pluginOptions()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TARGET\tPROJECT\tGLOBAL\tFILES (project)")
			for _, s := range plugin.List(o) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Target, yesNo(s.Project, "installed", "-"), yesNo(s.Global, "installed", "-"), strings.Join(relPaths(o.ProjectDir, s.Files), ", "))
			}
			return tw.Flush()
		},
	}
}

func yesNo(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func relPaths(base string, ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		if r, err := filepath.Rel(base, p); err == nil && !strings.HasPrefix(r, "..") {
			p = r
		}
		out[i] = p
	}
	return out
}
