package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

const snapshotLong = `Snapshots of persistent sandboxes: a sandbox's writable layer (what was
written inside since the image) turned into read-only layers that new
sandboxes stack.

'snapshot take' of a running sandbox freezes its processes for as long as its
writable layer is copied (cloned where the file system can); of a stopped one
it takes the writable layer as it is (a rename) and the sandbox goes on over
it. 'snapshot restore' creates a new, stopped sandbox with the snapshot's
files under a fresh writable layer of its own: nothing is copied, whatever the
size. Files keep their owners and modes. 'snapshot delete' removes a
snapshot; its layers stay as long as a sandbox still stacks them.

The copy-on-write view of the project directory (/workspace, profile
moderate) is not part of a snapshot: a restored sandbox sees the project as
it is on the host.

Snapshot names follow the sandbox names' rule; the default is
<sandbox>-YYYYMMDD. A restored sandbox is called <sandbox>-restored unless
--as names it.`

// newSnapshotCmd is the "snapshot" group.
func newSnapshotCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots", "snap"},
		Short:   "Take, list, restore and delete snapshots of persistent sandboxes",
		Long:    snapshotLong,
		Example: `  agentkernel snapshot take dev --name dev-before-upgrade
  agentkernel snapshot restore dev-before-upgrade --as dev2
  agentkernel snapshot list
  agentkernel snapshot delete dev-before-upgrade`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSnapshotTakeCmd(a), newSnapshotListCmd(a), newSnapshotRestoreCmd(a), newSnapshotDeleteCmd(a))
	return cmd
}

// snapshotError maps snapshot errors to exit codes and hints; the
// sandboxes' errors go through sandboxError with the sandbox's name.
func snapshotError(snap, sb string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrSnapshotNotFound):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("snapshot %q not found", snap), Hint: "see 'agentkernel snapshot list'"}
	case errors.Is(err, sandbox.ErrSnapshotExists):
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("snapshot %q already exists", snap), Hint: "choose another with --name, or delete it first"}
	}
	return sandboxError(sb, err)
}

func newSnapshotTakeCmd(a *App) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "take SANDBOX",
		Short: "Snapshot a sandbox's files (running: frozen meanwhile; stopped: its layer as it is)",
		Example: `  agentkernel snapshot take dev
  agentkernel snapshot take dev --name dev-clean`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			snap := name
			if snap == "" {
				snap = sandbox.DefaultSnapshotName(args[0], time.Now())
			}
			s, err := m.TakeSnapshot(cmdContext(cmd), args[0], snap)
			if err != nil {
				return snapshotError(snap, args[0], err)
			}
			fmt.Fprintln(a.Stdout, s.Name)
			return nil
		},
	}
	cmd.ValidArgsFunction = a.completeFirstSandboxName(1)
	cmd.Flags().StringVar(&name, "name", "", "the snapshot's name (default <sandbox>-YYYYMMDD)")
	return cmd
}

func newSnapshotListCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List snapshots, oldest first",
		Example: "  agentkernel snapshot list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			out, err := m.ListSnapshots(cmdContext(cmd))
			if err != nil {
				return snapshotError("", "", err)
			}
			if asJSON {
				if out == nil {
					out = []*sandbox.Snapshot{}
				}
				enc := json.NewEncoder(a.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSANDBOX\tBACKEND\tCREATED")
			for _, s := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Sandbox, s.Backend, s.CreatedAt.Local().Format("2006-01-02 15:04:05"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSnapshotRestoreCmd(a *App) *cobra.Command {
	var as string
	cmd := &cobra.Command{
		Use:   "restore SNAPSHOT",
		Short: "Create a new, stopped sandbox from a snapshot (nothing is copied)",
		Example: `  agentkernel snapshot restore dev-clean --as dev2
  agentkernel sandbox start dev2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			if as == "" {
				s, err := m.GetSnapshot(cmdContext(cmd), args[0])
				if err != nil {
					return snapshotError(args[0], "", err)
				}
				as = sandbox.DefaultRestoreName(s.Sandbox)
			}
			info, err := m.RestoreSnapshot(cmdContext(cmd), args[0], as)
			if err != nil {
				return snapshotError(args[0], as, err)
			}
			fmt.Fprintln(a.Stdout, info.Name)
			return nil
		},
	}
	cmd.Flags().StringVar(&as, "as", "", "the new sandbox's name (default <sandbox>-restored)")
	cmd.ValidArgsFunction = a.completeSnapshotName
	return cmd
}

func newSnapshotDeleteCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "delete SNAPSHOT",
		Aliases:           []string{"rm", "remove"},
		Short:             "Delete a snapshot (layers a sandbox stacks stay until it is removed)",
		Example:           "  agentkernel snapshot delete dev-clean",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeSnapshotName,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			if err := m.DeleteSnapshot(cmdContext(cmd), args[0]); err != nil {
				return snapshotError(args[0], "", err)
			}
			return nil
		},
	}
	return cmd
}

// completeSnapshotName completes a command's one argument with the
// names of the data directory's snapshots (their metadata files; no
// state store opened).
func (a *App) completeSnapshotName(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return a.completeMetaNames(args, "snapshots", sandbox.ValidateSnapshotName)
}

// completeMetaNames completes a command's one argument with the names
// of the NAME.json files of the data directory's subdirectory dir that
// valid accepts.
func (a *App) completeMetaNames(args []string, dir string, valid func(string) error) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ents, _ := os.ReadDir(filepath.Join(a.DataDir, dir))
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && valid(n) == nil {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
