package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/plugin"
)

// agentInfo describes one coding agent for 'agentkernel agents'.
type agentInfo struct {
	Name    string   `json:"name"`
	Binary  string   `json:"binary"`
	Target  string   `json:"plugin_target"`
	KeyEnv  []string `json:"api_key_env,omitempty"`
	Install string   `json:"install_hint"`
}

var knownAgents = []agentInfo{
	{Name: "Claude Code", Binary: "claude", Target: "claude", KeyEnv: []string{"ANTHROPIC_API_KEY"}, Install: "npm install -g @anthropic-ai/claude-code"},
	{Name: "Codex", Binary: "codex", Target: "codex", KeyEnv: []string{"OPENAI_API_KEY"}, Install: "npm install -g @openai/codex"},
	{Name: "Gemini CLI", Binary: "gemini", Target: "gemini", KeyEnv: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, Install: "npm install -g @google/gemini-cli"},
	{Name: "OpenCode", Binary: "opencode", Target: "opencode", Install: "npm install -g opencode-ai"},
}

// agentStatus is one row of the table.
type agentStatus struct {
	agentInfo
	Path          string `json:"path,omitempty"`
	Installed     bool   `json:"installed"`
	APIKey        string `json:"api_key"` // "set", "missing" or "n/a"
	PluginProject bool   `json:"plugin_project"`
	PluginGlobal  bool   `json:"plugin_global"`
}

func newAgentsCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Show which coding agents are installed, have an API key and use agentkernel",
		Long: `Show the coding agents agentkernel knows: Claude Code (claude), Codex
(codex), Gemini CLI (gemini) and OpenCode (opencode). For each: whether its
command is on PATH, whether its API key is set in the environment
(ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or GOOGLE_API_KEY;
OpenCode brings its own provider setup), and whether the agentkernel plugin
is installed in this project or globally, with what to run next.`,
		Example: "  agentkernel agents\n  agentkernel agents --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := pluginOptions()
			if err != nil {
				return err
			}
			rows := agentRows(o, exec.LookPath, os.Getenv)
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tCOMMAND\tINSTALLED\tAPI KEY\tPLUGIN\tNEXT")
			for _, r := range rows {
				inst := "no"
				if r.Installed {
					inst = "yes"
				}
				pl := "-"
				switch {
				case r.PluginProject && r.PluginGlobal:
					pl = "project, global"
				case r.PluginProject:
					pl = "project"
				case r.PluginGlobal:
					pl = "global"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Binary, inst, r.APIKey, pl, nextStep(r))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func agentRows(o plugin.Options, lookPath func(string) (string, error), getenv func(string) string) []agentStatus {
	list := plugin.List(o)
	var rows []agentStatus
	for _, ag := range knownAgents {
		r := agentStatus{agentInfo: ag, APIKey: "n/a"}
		if p, err := lookPath(ag.Binary); err == nil {
			r.Path, r.Installed = p, true
		}
		if len(ag.KeyEnv) > 0 {
			r.APIKey = "missing"
			for _, k := range ag.KeyEnv {
				if getenv(k) != "" {
					r.APIKey = "set (" + k + ")"
					break
				}
			}
		}
		for _, s := range list {
			if s.Target == ag.Target {
				r.PluginProject, r.PluginGlobal = s.Project, s.Global
			}
		}
		rows = append(rows, r)
	}
	return rows
}

func nextStep(r agentStatus) string {
	switch {
	case !r.Installed:
		return r.Install
	case r.APIKey == "missing":
		return "export " + r.KeyEnv[0] + "=… (or log in with '" + r.Binary + "')"
	case !r.PluginProject && !r.PluginGlobal:
		return "agentkernel plugin install " + r.Target
	}
	return "ready"
}
