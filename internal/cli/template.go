package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/cli/runcli"
	"github.com/agentkernel/agentkernel/internal/templates"
)

const templateLong = `Templates are agentkernel.toml documents a sandbox starts from:
'agentkernel run --template NAME -- CMD' and 'agentkernel sandbox create
--template NAME'. A template's settings are a configuration layer above
your user config (~/.config/agentkernel/config.toml) and below the
project's agentkernel.toml and the command-line flags; 'agentkernel config
show --template NAME' shows each value with its source.

NAME is looked up in this order: a file (NAME contains '/' or ends in
.toml, and exists), a local template (<data-dir>/templates/NAME.toml),
a built-in. A local template hides a built-in of the same name.
github:OWNER/REPO/PATH templates are not fetched by this build: download
the file and give its path.

A template may not set what only your own configuration sets: [secrets]
bindings, [security] allow_degraded, [api], [mcp], and it may not name host
files ([[files]], [build]) or host services ([daemon], [orchestrator]).`

func newTemplateCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Aliases: []string{"templates"},
		Short:   "List, show, save, add and remove sandbox templates",
		Long:    templateLong,
		Example: `  agentkernel template list
  agentkernel template show python-ci
  agentkernel run --template python-ci -- pytest
  agentkernel template save --from dev mydev
  agentkernel template add team ./team-template.toml
  agentkernel template remove team`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTemplateListCmd(a), newTemplateShowCmd(a), newTemplateSaveCmd(a), newTemplateAddCmd(a), newTemplateRemoveCmd(a))
	return cmd
}

func newTemplateListCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list [flags]",
		Aliases: []string{"ls"},
		Short:   "List the templates: NAME SOURCE IMAGE (local ones hide built-ins of the same name)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			list, err := templates.List(a.DataDir)
			if err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("templates: %w", err)}
			}
			if asJSON {
				if list == nil {
					list = []*templates.Template{}
				}
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSOURCE\tIMAGE")
			for _, t := range list {
				img := t.Image
				if img == "" {
					img = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Source, img)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: [{name, source, path, image}]")
	return cmd
}

func newTemplateShowCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Print a template's TOML",
		Args:  cobra.ExactArgs(1),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, word string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return a.completeTemplates(cmd, args, word)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := templates.Resolve(args[0], a.DataDir)
			if err != nil {
				return runcli.TemplateError(err)
			}
			_, err = a.Stdout.Write(t.Data)
			return err
		},
	}
}

func newTemplateAddCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "add NAME FILE",
		Short: "Validate a TOML file and copy it into the local templates as NAME",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := templates.Add(a.DataDir, args[0], args[1])
			if err != nil {
				return runcli.TemplateError(err)
			}
			a.Infof("Added template %s (%s).", args[0], path)
			return nil
		},
	}
}

func newTemplateRemoveCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:     "remove NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a local template (built-ins cannot be removed)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := templates.Remove(a.DataDir, args[0]); err != nil {
				return runcli.TemplateError(err)
			}
			a.Infof("Removed template %s.", args[0])
			return nil
		},
	}
}

func newTemplateSaveCmd(a *App) *cobra.Command {
	var from string
	var force bool
	cmd := &cobra.Command{
		Use:   "save --from SANDBOX NAME",
		Short: "Save a sandbox's settings as the local template NAME",
		Long: `Save a persistent sandbox's resolved settings as the local template NAME:
its image, agent mode, resources, profile, seccomp profile, read-only root,
network mode and domain, address and command rules. Not saved: its
environment (it may hold secrets), mounts, published ports, files and
secrets.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return usageError("template save needs --from SANDBOX")
			}
			if err := templates.ValidateName(args[0]); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			data, err := a.templateFromSandbox(cmdContext(cmd), from)
			if err != nil {
				return err
			}
			path, err := templates.Save(a.DataDir, args[0], data, force)
			if err != nil {
				return runcli.TemplateError(err)
			}
			a.Infof("Saved template %s from sandbox %s (%s).", args[0], from, path)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the sandbox whose settings are saved")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "replace a local template of the same name")
	return cmd
}
