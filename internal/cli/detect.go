package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/detect"
)

const detectLong = `Show which image 'agentkernel run' would use for a command in this
directory, and which rule chose it. Nothing is pulled or run.

Rules, strongest first:
  flag      --image
  config    [sandbox].base_image, else [sandbox].runtime (python, node, go, ...)
  command   the basename of the command (python3 -> python:3.12-alpine)
  project   a project file here (go.mod, package.json, *.csproj, ...)
  procfile  the first Procfile process whose command is known
  default   ` + detect.DefaultImage + `

A shell (sh, bash, zsh, ash) wraps other commands, so for 'bash -c ...' the
project files and the Procfile are consulted before the shell's own image.
'--table' prints every command and project file that is recognised.`

const detectExample = `  agentkernel detect -- python3 app.py
  agentkernel detect -- cargo test
  agentkernel detect                      # from project files only
  agentkernel detect --table`

func newDetectCmd(a *App) *cobra.Command {
	var image string
	var table, asJSON bool
	cmd := &cobra.Command{
		Use:     "detect [flags] [-- COMMAND [ARG...]]",
		Short:   "Show which image a command would run in, and why",
		Long:    detectLong,
		Example: detectExample,
		RunE: func(cmd *cobra.Command, args []string) error {
			if table {
				if len(args) > 0 {
					return usageError("--table takes no command")
				}
				printDetectTable(a)
				return nil
			}
			c, err := a.LoadConfig(".")
			if err != nil {
				return err
			}
			r := detect.Image(detect.Input{
				ExplicitImage: image,
				ConfigImage:   c.Sandbox.BaseImage,
				ConfigRuntime: c.Sandbox.Runtime,
				Args:          args,
				Dir:           ".",
			})
			r.Fallback = a.FallbackNote(r.Image, r.Rule)
			if asJSON {
				return json.NewEncoder(a.Stdout).Encode(r)
			}
			fmt.Fprintln(a.Stdout, r.String())
			return nil
		},
	}
	cmd.Flags().SetInterspersed(false) // 'detect python3 -c x': -c belongs to python3
	cmd.Flags().StringVarP(&image, "image", "i", "", "an explicit image (as 'run --image'); it always wins")
	cmd.Flags().BoolVar(&table, "table", false, "print the detection tables instead")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {image, rule, detail} as JSON")
	return cmd
}

func printDetectTable(a *App) {
	fmt.Fprintln(a.Stdout, "Commands and project files (first match wins, top to bottom):")
	fmt.Fprintln(a.Stdout)
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNTIME\tIMAGE\tCOMMANDS\tPROJECT FILES")
	for _, rt := range detect.Table() {
		cmds := strings.Join(rt.Commands, " ")
		if cmds == "" {
			cmds = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rt.Name, rt.Image, cmds, strings.Join(rt.ProjectFiles, " "))
	}
	fmt.Fprintf(tw, "(default)\t%s\tanything else\t-\n", detect.DefaultImage)
	tw.Flush()

	fmt.Fprintln(a.Stdout)
	fmt.Fprintln(a.Stdout, "[sandbox].runtime shorthands:")
	fmt.Fprintln(a.Stdout)
	tw = tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUNTIME\tIMAGE")
	for _, s := range detect.Shorthands() {
		fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Image)
	}
	tw.Flush()

	fmt.Fprintln(a.Stdout)
	fmt.Fprintln(a.Stdout, `Procfile: the first "name: command" line whose command's first word is in the`)
	fmt.Fprintln(a.Stdout, "command table; a line with an empty command stops the search.")
	fmt.Fprintln(a.Stdout, "Precedence: "+strings.Join(detect.Precedence(), " > "))
}
