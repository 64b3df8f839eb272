package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/image"
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

The sandbox's edits to the copy-on-write view of the project directory
(/workspace, profile moderate) are part of a snapshot: a restored sandbox sees
them over the project as it is on the host now.

'snapshot export' makes an image of a snapshot: the base image's layers and
the snapshot's, with the base image's config. By default it goes into the
local image store as agentkernel-snap:NAME (--tag names another), which
'run --image' and 'sandbox create --image' use like any cached image; with
-o FILE (-o - for stdout) it is written as a 'docker save' tarball that
'agentkernel images load', 'docker load', 'podman load' and skopeo
(docker-archive:) read.

Snapshot names follow the sandbox names' rule; the default is
<sandbox>-YYYYMMDD. A restored sandbox is called <sandbox>-restored unless
--as names it.`

// newSnapshotCmd is the "snapshot" group.
func newSnapshotCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "snapshot",
		Aliases: []string{"snapshots", "snap"},
		Short:   "Take, list, restore, export and delete snapshots of persistent sandboxes",
		Long:    snapshotLong,
		Example: `  agentkernel snapshot take dev --name dev-before-upgrade
  agentkernel snapshot restore dev-before-upgrade --as dev2
  agentkernel snapshot list
  agentkernel snapshot export dev-before-upgrade
  agentkernel run --image agentkernel-snap:dev-before-upgrade -- ls /root
  agentkernel snapshot delete dev-before-upgrade`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newSnapshotTakeCmd(a), newSnapshotListCmd(a), newSnapshotRestoreCmd(a), newSnapshotExportCmd(a), newSnapshotDeleteCmd(a))
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
	var memory bool
	cmd := &cobra.Command{
		Use:   "take SANDBOX",
		Short: "Snapshot a sandbox's files (running: frozen meanwhile; stopped: its layer as it is)",
		Long: `Snapshot a sandbox's files: a running sandbox is frozen while its writable
layer is copied; a stopped one's layer becomes the snapshot's as it is.

--memory (running gvisor sandboxes without secrets) also takes the
sandbox's memory, in the same freeze: its detached commands (exec --detach)
and what they hold. The first 'sandbox start' of a sandbox restored from such
a snapshot resumes them where they were, listed as running by 'exec --list',
servers listening again on its network; later starts boot afresh from the
files. Foreground commands (exec without --detach) are not kept: their
callers are gone; nor are connections open at the take. The source runs on.`,
		Example: `  agentkernel snapshot take dev
  agentkernel snapshot take dev --name dev-clean
  agentkernel snapshot take dev --name dev-live --memory   # -B gvisor, running`,
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
			end := a.working("taking snapshot " + snap + " of " + args[0])
			s, err := m.TakeSnapshotWith(cmdContext(cmd), args[0], snap, sandbox.SnapshotOptions{Memory: memory})
			end()
			if err != nil {
				return snapshotError(snap, args[0], err)
			}
			fmt.Fprintln(a.Stdout, s.Name)
			return nil
		},
	}
	cmd.ValidArgsFunction = a.completeFirstSandboxName(1)
	cmd.Flags().StringVar(&name, "name", "", "the snapshot's name (default <sandbox>-YYYYMMDD)")
	cmd.Flags().BoolVar(&memory, "memory", false, "also take the running sandbox's memory: its detached commands resume at the restored sandbox's first start (gvisor)")
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
			fmt.Fprintln(tw, "NAME\tSANDBOX\tBACKEND\tCREATED\tMEMORY")
			for _, s := range out {
				mem := "-"
				if s.Memory {
					mem = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Sandbox, s.Backend, s.CreatedAt.Local().Format("2006-01-02 15:04:05"), mem)
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

// SnapshotImageRepo is the repository of a snapshot's image when export
// is given no --tag: agentkernel-snap:NAME (upstream's image tag of a
// snapshot).
const SnapshotImageRepo = "agentkernel-snap"

func newSnapshotExportCmd(a *App) *cobra.Command {
	var tag, output string
	cmd := &cobra.Command{
		Use:   "export SNAPSHOT",
		Short: "Make an image of a snapshot: into the image store, or a 'docker save' tarball with -o",
		Long: `Make an OCI image of a snapshot: the layers of the image its sandbox was
created from and the snapshot's own, each written as an image layer
(overlayfs whiteouts become .wh. entries, opaque directories .wh..wh..opq,
owners the image's own ids), with the base image's config (environment,
command, working directory).

Without -o the image goes into the local image store under --tag
(default agentkernel-snap:SNAPSHOT): 'run --image REF' and 'sandbox create
--image REF' use it, 'images list' shows it, 'images rm' removes it. The
snapshot's layers are unpacked by the store as any image's are; the base
image's are shared.

With -o FILE the image is written as a 'docker save' tarball (uncompressed
layers), named by --tag, that 'agentkernel images load', 'docker load',
'podman load' and skopeo (docker-archive:FILE) read; '-o -' writes it to
standard output (not a terminal). FILE is written through a temporary file
beside it and renamed at the end; an existing symbolic link or anything
but a regular file there is refused.

A file inside the snapshot whose name starts with ".wh." cannot be
exported (an image would read it as a deletion): the export is refused,
naming it.

The snapshot is held while it is exported: a 'snapshot delete', 'take' or
'restore' started meanwhile waits for the export to finish. Each export
is recorded in the audit log ('agentkernel audit --sandbox SOURCE').`,
		Example: `  agentkernel snapshot export dev-clean
  agentkernel run --image agentkernel-snap:dev-clean -- ls /root
  agentkernel snapshot export dev-clean --tag team/dev:clean
  agentkernel snapshot export dev-clean -o dev-clean.tar && docker load -i dev-clean.tar`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeSnapshotName,
		RunE: func(cmd *cobra.Command, args []string) error {
			snap := args[0]
			if err := sandbox.ValidateSnapshotName(snap); err != nil {
				return &ExitError{Code: ExitAgentkernel, Err: err}
			}
			ref := tag
			if ref == "" {
				ref = SnapshotImageRepo + ":" + snap
			}
			if _, err := image.NormalizeRef(ref); err != nil || image.IsHost(ref) {
				if err == nil {
					err = errors.New("the name is reserved for the host image")
				}
				return usageError("snapshot export: --tag %q: %v", ref, err)
			}
			if output == "-" && isTerminal(a.Stdout) {
				return usageError("snapshot export: refusing to write an image archive to a terminal: redirect standard output, or give -o FILE")
			}
			if output != "" && output != "-" {
				if err := checkOutputPath(output); err != nil {
					return err
				}
			}
			m, done, err := a.sandboxes()
			if err != nil {
				return err
			}
			defer done()
			ctx, stop := imagesContext(cmd)
			defer stop()
			s, err := a.openImageStore()
			if err != nil {
				return err
			}
			defer s.Close()
			to := ref
			if output != "" {
				to = "archive " + output + " as " + ref
			}
			// The snapshot is held (its layers with it) until the image
			// is written: a delete, take or restore meanwhile waits.
			var exportErr error
			err = m.ExportSnapshot(ctx, snap, to, func(ctx context.Context, meta *sandbox.Snapshot, spec *sandbox.Spec) error {
				src := image.ExportSource{Layers: spec.Rootfs.Layers, IDMap: spec.Rootfs.IDMap, BaseDigest: spec.Rootfs.Digest,
					Config: spec.Rootfs.Config, CreatedBy: "agentkernel snapshot export " + snap, Created: meta.CreatedAt}
				end := a.working("exporting snapshot " + snap)
				defer end()
				switch output {
				case "":
					sum, err := s.Commit(ctx, src, ref)
					if err != nil {
						exportErr = err
						return err
					}
					fmt.Fprintf(a.Stdout, "%s@%s\n", sum.Ref, sum.Digest)
				case "-":
					exportErr = s.WriteArchive(ctx, src, ref, a.Stdout)
				default:
					exportErr = writeFileAtomic(output, func(w io.Writer) error { return s.WriteArchive(ctx, src, ref, w) })
				}
				return exportErr
			})
			if exportErr != nil {
				return exportError(snap, exportErr)
			}
			if err != nil {
				return snapshotError(snap, "", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&tag, "tag", "t", "", "the image's reference (default agentkernel-snap:SNAPSHOT)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write a 'docker save' tarball to FILE ('-': standard output) instead of the image store")
	return cmd
}

func exportError(snap string, err error) error {
	if errors.Is(err, image.ErrNotExportable) {
		return &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("snapshot %q: %w", snap, err)}
	}
	return imageError(err)
}

// checkOutputPath refuses an output path that is a symbolic link or an
// existing file that is not a regular one.
func checkOutputPath(p string) error {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return &ExitError{Code: ExitAgentkernel, Err: err}
	case fi.Mode()&fs.ModeSymlink != 0:
		return usageError("snapshot export: -o %s: refusing to write through a symbolic link", p)
	case !fi.Mode().IsRegular():
		return usageError("snapshot export: -o %s: not a regular file", p)
	}
	return nil
}

// writeFileAtomic writes p through a temporary file in its directory,
// synced and renamed over p at the end (a rename replaces a link put
// there meanwhile, never follows it); on failure p is untouched.
func writeFileAtomic(p string, write func(io.Writer) error) error {
	if err := checkOutputPath(p); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return &ExitError{Code: ExitAgentkernel, Err: err}
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
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
