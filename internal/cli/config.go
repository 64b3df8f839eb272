package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/config"
)

const initLong = `Write a commented agentkernel.toml in the current directory (or at the
path given with --config). An existing file is never overwritten.

The file leaves the image, the resource limits and the security switches
commented out, so that auto-detection and the security profile decide until
you choose otherwise.`

const initExample = `  agentkernel init
  agentkernel init --name api-server --agent codex
  agentkernel --config ci/agentkernel.toml init`

func newInitCmd(a *App) *cobra.Command {
	var name, agent string
	cmd := &cobra.Command{
		Use:     "init [flags]",
		Short:   "Write a commented agentkernel.toml for this project",
		Long:    initLong,
		Example: initExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path := a.ConfigPath
			if path == "" {
				path = config.FileName
			}
			if name == "" {
				name = config.DefaultTemplateName(filepath.Dir(path))
			}
			if err := config.WriteTemplate(path, name, agent); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "see its values with 'agentkernel config show'"}
				}
				return usageError("%v", err)
			}
			fmt.Fprintf(a.Stdout, "Wrote %s (sandbox %q, agent %s).\n", path, config.TemplateName(name), agent)
			fmt.Fprintf(a.Stdout, "Next: edit it, check it with 'agentkernel config show', then 'agentkernel run -- <command>'.\n")
			return nil
		},
	}
	cmd.Flags().StringVarP(&name, "name", "n", "", "sandbox name (default: the directory's name)")
	cmd.Flags().StringVarP(&agent, "agent", "a", "claude", "the agent this project is used with: claude, codex, gemini or opencode")
	return cmd
}

const configLong = `Inspect the configuration that 'agentkernel run' uses.

Values come from, lowest precedence first: built-in defaults, the user file
($XDG_CONFIG_HOME/agentkernel/config.toml, else
~/.config/agentkernel/config.toml), the template of --template NAME (see
'agentkernel template --help'), and the project file (--config PATH, else
./agentkernel.toml). Command-line flags override all of them.`

func newConfigCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the effective configuration and where each value came from",
		Long:  configLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newConfigShowCmd(a))
	return cmd
}

func newConfigShowCmd(a *App) *cobra.Command {
	var (
		asJSON   bool
		template string
	)
	cmd := &cobra.Command{
		Use:   "show [flags]",
		Short: "Print every effective value and its source (default, user file:line, project file:line)",
		Long: configLong + `

'config show' prints every key of the schema. "unset (profile decides)"
marks values that the security profile chooses; API keys and tokens are
masked. Keys that upstream's files use but that change nothing in this
build are marked in the NOTE column ("SET, BUT NO EFFECT" when a file sets
one) and explained below the table; --json gives the reason as no_effect.`,
		Example: `  agentkernel config show
  agentkernel config show --json | jq '.values[] | select(.source.kind != "default")'
  agentkernel --config ci.toml config show
  agentkernel config show --template python-ci`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if template != "" {
				if err := a.UseTemplate(template); err != nil {
					return err
				}
			}
			c, err := a.LoadConfig(".")
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				files := c.Loaded
				if files == nil {
					files = []config.Source{}
				}
				return enc.Encode(struct {
					Files  []config.Source `json:"files"`
					Values []config.Value  `json:"values"`
				}{files, c.Values()})
			}
			a.printConfig(c)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: {files, values: [{key, value, text, source, no_effect}]}")
	cmd.Flags().StringVar(&template, "template", "", "include this template's layer (as 'run --template' would): its values show source \"template NAME:LINE\"")
	return cmd
}

func (a *App) printConfig(c *config.Config) {
	if len(c.Loaded) == 0 {
		user := config.UserPath(os.Getenv)
		project := a.ConfigPath
		if project == "" {
			project = config.FileName
		}
		fmt.Fprintf(a.Stdout, "# No configuration file found (looked for %s and %s): built-in defaults.\n", user, project)
	} else {
		fmt.Fprintln(a.Stdout, "# Files read, lowest precedence first:")
		for _, f := range c.Loaded {
			fmt.Fprintf(a.Stdout, "#   %-8s %s\n", f.Kind, f.Path)
		}
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE\tNOTE")
	marked := map[string]bool{}
	for _, v := range c.Values() {
		note := ""
		if v.NoEffect != "" {
			note = "no effect (see below)"
			if v.Source.Kind != config.SourceDefault {
				marked[v.NoEffect] = true
				note = "SET, BUT NO EFFECT (see below)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Key, v.Text, v.Source, note)
	}
	tw.Flush()
	fmt.Fprintln(a.Stdout, "\n# Accepted for compatibility with upstream's files, but no effect in this build:")
	for _, g := range config.NoEffectGroups() {
		mark := " "
		if marked[g[1]] {
			mark = "!"
		}
		fmt.Fprintf(a.Stdout, "# %s %s: %s\n", mark, g[0], g[1])
	}
}
