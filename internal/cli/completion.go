package cli

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/detect"
	"github.com/agentkernel/agentkernel/internal/image"
	"github.com/agentkernel/agentkernel/internal/policy"
	"github.com/agentkernel/agentkernel/internal/templates"
)

// Shell completion ('agentkernel completion bash|zsh|fish'): cobra asks
// the binary itself (its hidden __complete command) for the words that
// fit where the cursor is. Sandbox names come from the data directory's
// sandboxes, image names from the image cache and detection's table,
// profiles and modes from policy's tables.

// completing reports whether args (the program name first) ask cobra for
// completions.
func completing(args []string) bool {
	return len(args) > 1 && (args[1] == cobra.ShellCompRequestCmd || args[1] == cobra.ShellCompNoDescRequestCmd)
}

// leanParsedCommands are the commands whose command line runcli parses
// (cobra does not): completing, cobra must read their flags itself to
// know where their arguments are.
var leanParsedCommands = []string{"run", "exec", "attach", "cp", "stats"}

// registerCompletions gives root's commands their dynamic completions:
// the value of every flag named image, profile, mode,
// compatibility-mode, network, pull, userns or template, wherever it is
// bound.
func registerCompletions(a *App, root *cobra.Command) {
	values := map[string]cobra.CompletionFunc{
		"image":              a.completeImages,
		"profile":            fixedCompletions(profileNames()),
		"mode":               fixedCompletions(modeNames()),
		"compatibility-mode": fixedCompletions(modeNames()),
		"network":            fixedCompletions([]string{"none\tloopback only", "filtered\tonly --allow-domain names", "full\tall but --block-domain names"}),
		"pull":               fixedCompletions([]string{"missing", "always", "never"}),
		"userns":             fixedCompletions([]string{"private", "host"}),
		"template":           a.completeTemplates,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if fn, ok := values[f.Name]; ok {
				_ = c.RegisterFlagCompletionFunc(f.Name, fn)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// fixedCompletions completes from a fixed list ("word\tdescription").
func fixedCompletions(words []string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return words, cobra.ShellCompDirectiveNoFileComp
	}
}

func profileNames() []string {
	var out []string
	for _, p := range policy.Profiles() {
		out = append(out, p.Name+"\t"+p.Summary)
	}
	return out
}

func modeNames() []string {
	var out []string
	for _, m := range policy.Modes() {
		out = append(out, m.Name+"\t"+m.Summary)
	}
	return out
}

// completeImages offers the cached images (repository:tag) and the
// images detection picks, cached or not.
func (a *App) completeImages(cmd *cobra.Command, _ []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []string
	seen := map[string]bool{}
	add := func(ref, desc string) {
		if ref != "" && !seen[ref] {
			seen[ref] = true
			out = append(out, ref+"\t"+desc)
		}
	}
	if _, err := os.Stat(filepath.Join(a.DataDir, "images")); err == nil {
		// Opened quietly: completion writes nothing but its words.
		s, err := image.Open(a.DataDir, image.Options{IDMap: image.DefaultIDMap(), Progress: io.Discard, Quiet: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			ctx := cmdContext(cmd)
			list, _ := s.List(ctx)
			s.Close()
			for _, im := range list {
				if im.Repository != "" && im.Tag != "" {
					add(displayRepository(im.Repository)+":"+im.Tag, "cached")
				}
			}
		}
	}
	for _, r := range detect.Table() {
		add(r.Image, r.Name)
	}
	add("host", "the host's own tools, read-only")
	return out, cobra.ShellCompDirectiveNoFileComp
}

// sandboxNames lists the persistent sandboxes of the data directory,
// from their directories (no state store opened), sorted.
func (a *App) sandboxNames() []string {
	ents, err := os.ReadDir(filepath.Join(a.DataDir, "sandboxes"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && config.ValidateSandboxName(e.Name()) == nil {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// completeSandboxNames completes every argument with a sandbox name not
// already given (start, stop, rm NAME...).
func (a *App) completeSandboxNames(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	var out []string
	for _, n := range a.sandboxNames() {
		if !slices.Contains(args, n) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeFirstSandboxName completes the first argument with a sandbox
// name (exec, attach, info, logs NAME) and leaves the rest to the shell.
func (a *App) completeFirstSandboxName(maxArgs int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return a.sandboxNames(), cobra.ShellCompDirectiveNoFileComp
		}
		if maxArgs > 0 && len(args) >= maxArgs {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveDefault
	}
}

// completeCp completes cp's SRC and DEST: host files, and NAME: for
// each sandbox.
func (a *App) completeCp(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) >= 2 || strings.Contains(toComplete, "/") {
		return nil, cobra.ShellCompDirectiveDefault
	}
	var out []string
	for _, n := range a.sandboxNames() {
		out = append(out, n+":")
	}
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveDefault
}

// completeTemplates offers the templates (local and built-in) by name.
func (a *App) completeTemplates(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
	list, _ := templates.List(a.DataDir)
	out := make([]string, 0, len(list))
	for _, t := range list {
		out = append(out, t.Name+"\t"+t.Source+" "+t.Image)
	}
	return out, cobra.ShellCompDirectiveDefault
}
