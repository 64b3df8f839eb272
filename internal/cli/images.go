package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentkernel/agentkernel/internal/image"
)

const imagesLong = `Manage the image cache: pull images from any OCI registry, load them from
'docker save' tarballs or OCI layouts, import plain root filesystem
tarballs, and list, inspect and remove what is cached.

Every layer is verified by digest and unpacked once, by a confined
extractor, into <data-dir>/images/layers; images that share a layer share
its directory. 'agentkernel run' pulls what it needs by itself (--pull
missing|always|never); these commands are for preparing machines, offline
use and housekeeping.

Registry credentials come from Docker's config (~/.docker/config.json or
$DOCKER_CONFIG, including credential helpers): 'docker login' works.
Registries on localhost or 127.0.0.0/8 are spoken to over plain HTTP;
others only with --insecure-registry HOST[:PORT].

The image "host" is not stored: it is the host's own read-only root
filesystem, used when no registry can be reached.`

const imagesExample = `  agentkernel images pull alpine:3.20
  agentkernel images pull --platform linux/arm64 python:3.12-alpine
  agentkernel images pull --insecure-registry registry.lan:5000 registry.lan:5000/team/tools:1
  agentkernel images list
  agentkernel images inspect alpine:3.20
  docker save myimage:1 -o myimage.tar && agentkernel images load -i myimage.tar
  agentkernel images import rootfs.tar.gz mytools:1
  agentkernel images rm alpine:3.20 && agentkernel images prune`

// openImageStore opens the image store under --data-dir with the id
// shift the native backend uses, progress on stderr unless --quiet.
func (a *App) openImageStore() (*image.Store, error) {
	return a.openImageStoreWith(image.Options{})
}

// openImageStoreWith is openImageStore with extra options (platform,
// insecure registries) already filled in.
func (a *App) openImageStoreWith(o image.Options) (*image.Store, error) {
	o.IDMap = image.DefaultIDMap()
	o.Progress = a.Stderr
	o.Quiet = a.Quiet
	o.Logger = a.Logger
	s, err := image.Open(a.DataDir, o)
	if err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: err}
	}
	return s, nil
}

// imageError turns a store error into an ExitError with a hint where one
// helps.
func imageError(err error) error {
	var ee *ExitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	hint := ""
	switch {
	case errors.Is(err, image.ErrUnreachable):
		hint = "no network? 'agentkernel images load' takes a 'docker save' tarball; the image \"host\" needs none"
	case errors.Is(err, image.ErrNotFound):
		hint = "see 'agentkernel images list' for what is cached"
	}
	return &ExitError{Code: ExitAgentkernel, Err: err, Hint: hint}
}

func newImagesCmd(a *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "images",
		Aliases: []string{"image"},
		Short:   "Pull, load, list, inspect and remove cached images",
		Long:    imagesLong,
		Example: imagesExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := imagesContext(cmd)
			defer stop()
			return runImagesList(ctx, a, false)
		},
	}
	cmd.AddCommand(
		newImagesListCmd(a),
		newImagesPullCmd(a),
		newImagesInspectCmd(a),
		newImagesRmCmd(a),
		newImagesPruneCmd(a),
		newImagesLoadCmd(a),
		newImagesImportCmd(a),
	)
	return cmd
}

func newImagesListCmd(a *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List cached images",
		Long: `List cached images, one line per tag (untagged images once, as <none>).
SIZE is the unpacked size of the image's layers; layers shared between
images are counted in each.`,
		Example: "  agentkernel images list\n  agentkernel images list --json | jq -r '.[].ref'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := imagesContext(cmd)
			defer stop()
			return runImagesList(ctx, a, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}

func runImagesList(ctx context.Context, a *App, asJSON bool) error {
	s, err := a.openImageStore()
	if err != nil {
		return err
	}
	defer s.Close()
	list, err := s.List(ctx)
	if err != nil {
		return imageError(err)
	}
	if asJSON {
		if list == nil {
			list = []image.ImageSummary{}
		}
		return writeImagesJSON(a, list)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "REPOSITORY\tTAG\tDIGEST\tSIZE\tPULLED")
	now := time.Now()
	for _, im := range list {
		repo, tag := displayRepository(im.Repository), im.Tag
		if repo == "" {
			repo = "<none>"
		}
		if tag == "" {
			tag = "<none>"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", repo, tag, shortImageDigest(im.Digest), image.HumanSize(im.Size), pulledAgo(now, im.Pulled))
	}
	return tw.Flush()
}

// displayRepository shows Docker Hub repositories as people type them.
func displayRepository(r string) string {
	r = strings.TrimPrefix(r, "index.docker.io/")
	return strings.TrimPrefix(r, "library/")
}

func shortImageDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// pulledAgo renders how long before now t was, as "3 minutes ago".
func pulledAgo(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	unit := func(n int, s string) string {
		if n == 1 {
			return fmt.Sprintf("1 %s ago", s)
		}
		return fmt.Sprintf("%d %ss ago", n, s)
	}
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return unit(int(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int(d/time.Hour), "hour")
	case d < 60*24*time.Hour:
		return unit(int(d/(24*time.Hour)), "day")
	}
	return t.Local().Format("2006-01-02")
}

func newImagesPullCmd(a *App) *cobra.Command {
	var platform string
	var insecure []string
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image from its registry into the cache",
		Long: `Pull an image (even if it is cached, to pick up a moved tag), verify every
blob by digest, and unpack the layers the cache lacks, three at a time.
Docker Hub short names work as with docker: alpine:3.20 is
index.docker.io/library/alpine:3.20. A multi-arch image resolves to this
machine's platform unless --platform says otherwise.

On a terminal each layer gets a progress bar; otherwise (or with -q) a
line at the start and one at the end. The image's digest is printed on
stdout.`,
		Example: `  agentkernel images pull alpine:3.20
  agentkernel images pull ghcr.io/owner/tool@sha256:0123...
  agentkernel images pull --platform linux/arm64 node:22-alpine
  agentkernel images pull --insecure-registry registry.lan:5000 registry.lan:5000/tools:1`,
		Args: imagesExactArgs(1, "an image reference, e.g. alpine:3.20"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := imagesContext(cmd)
			defer stop()
			s, err := a.openImageStoreWith(image.Options{Platform: platform, InsecureRegistries: insecure})
			if err != nil {
				return err
			}
			defer s.Close()
			rfs, err := s.Pull(ctx, args[0])
			if err != nil {
				return imageError(err)
			}
			fmt.Fprintf(a.Stdout, "%s@%s\n", strings.SplitN(rfs.Ref, "@", 2)[0], rfs.Digest)
			return nil
		},
	}
	cmd.Flags().StringVar(&platform, "platform", "", "pick this platform from a multi-arch image (os/arch[/variant], e.g. linux/arm64)")
	cmd.Flags().StringArrayVar(&insecure, "insecure-registry", nil, "allow plain HTTP and unverified TLS for this registry HOST[:PORT] (repeatable)")
	return cmd
}

func newImagesInspectCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect REF...",
		Short: "Print what the cache knows about images, as JSON",
		Long: `Print a JSON array with one object per image: digests, tags, platform,
sizes, the runtime config (env, entrypoint, cmd, working dir, user), each
layer with its unpacked directory, and the stored manifest and image
config verbatim. REF is a tag, a digest reference (repo@sha256:...), or
a digest or digest prefix (sha256:0123456789ab).`,
		Example: "  agentkernel images inspect alpine:3.20\n  agentkernel images inspect sha256:3f1e2b7a9c0d | jq '.[0].layers[].path'",
		Args:    imagesMinArgs(1, "an image reference"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withImageStore(cmd, func(ctx context.Context, s *image.Store) error {
				var out []image.ImageDetails
				for _, ref := range args {
					d, err := s.Inspect(ctx, ref)
					if err != nil {
						return imageError(err)
					}
					out = append(out, d)
				}
				return writeImagesJSON(a, out)
			})
		},
	}
}

func newImagesRmCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:     "rm REF...",
		Aliases: []string{"remove", "rmi"},
		Short:   "Remove images from the cache",
		Long: `Remove tags; an image whose last tag goes (or that is named by digest) is
removed with all its tags. Unpacked layers stay until 'images prune',
since sandboxes may still use them; prune keeps those that a persistent
sandbox or a snapshot stacks, so removing an image never takes their
files away.`,
		Example: "  agentkernel images rm alpine:3.20\n  agentkernel images rm sha256:3f1e2b7a9c0d && agentkernel images prune",
		Args:    imagesMinArgs(1, "an image reference"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withImageStore(cmd, func(ctx context.Context, s *image.Store) error {
				for _, ref := range args {
					res, err := s.Remove(ctx, ref)
					if err != nil {
						return imageError(err)
					}
					for _, t := range res.Untagged {
						fmt.Fprintf(a.Stdout, "Untagged: %s\n", t)
					}
					if res.Deleted != "" {
						fmt.Fprintf(a.Stdout, "Deleted: %s\n", res.Deleted)
					}
				}
				return nil
			})
		},
	}
}

func newImagesPruneCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Delete layers no image uses, and leftovers of interrupted pulls",
		Long: `Delete unpacked layers that no cached image uses, images left untagged
when a pull moved their tag, unreferenced manifests and configs, and
leftovers of interrupted pulls. It waits for pulls in progress (in any
process) to finish.

A layer of a removed image that a persistent sandbox or a snapshot still
stacks is kept (and counted as kept, with who uses it) until the last of
them is removed or deleted; the next prune then deletes it.`,
		Example: "  agentkernel images prune",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withImageStore(cmd, func(ctx context.Context, s *image.Store) error {
				res, err := s.Prune(ctx, a.stackedLayers())
				if err != nil {
					return imageError(err)
				}
				if res.Kept > 0 {
					fmt.Fprintf(a.Stdout, "Kept %d %s still used by %s\n", res.Kept, imagesPlural(res.Kept, "layer", "layers"), strings.Join(res.KeptFor, ", "))
				}
				for _, d := range res.Images {
					fmt.Fprintf(a.Stdout, "Deleted: %s\n", d)
				}
				fmt.Fprintf(a.Stdout, "Removed %d %s (%s), %d %s, %d temporary %s\n",
					res.Layers, imagesPlural(res.Layers, "layer", "layers"), image.HumanSize(res.Bytes),
					res.Blobs, imagesPlural(res.Blobs, "blob", "blobs"), res.Temporary, imagesPlural(res.Temporary, "entry", "entries"))
				return nil
			})
		},
	}
}

func newImagesLoadCmd(a *App) *cobra.Command {
	var input string
	cmd := &cobra.Command{
		Use:   "load -i FILE",
		Short: "Load images from a 'docker save' tarball or an OCI layout",
		Long: `Load images from a 'docker save' tarball (plain, gzip or zstd), an OCI
image layout directory, or a tar of one (e.g. 'skopeo copy ... oci-archive:').
Tags come from the tarball's RepoTags, or from an OCI layout's
io.containerd.image.name annotation or a full reference in
org.opencontainers.image.ref.name; images without one are loaded untagged
and can be used by digest.`,
		Example: `  docker save alpine:3.20 -o alpine.tar && agentkernel images load -i alpine.tar
  skopeo copy docker://alpine:3.20 oci:./alpine-oci:docker.io/library/alpine:3.20
  agentkernel images load -i ./alpine-oci`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if input == "" {
				return usageError("images load: -i FILE is required")
			}
			ctx, stop := imagesContext(cmd)
			defer stop()
			s, err := a.openImageStore()
			if err != nil {
				return err
			}
			defer s.Close()
			loaded, err := s.Load(ctx, input)
			if err != nil {
				return imageError(err)
			}
			for _, im := range loaded {
				if im.Ref != "" {
					fmt.Fprintf(a.Stdout, "Loaded image: %s (%s)\n", im.Ref, shortImageDigest(im.Digest))
				} else {
					fmt.Fprintf(a.Stdout, "Loaded image: %s\n", im.Digest)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&input, "input", "i", "", "the tarball or OCI layout directory to load")
	return cmd
}

func newImagesImportCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "import ROOTFS.tar NAME:TAG",
		Short: "Make an image from a root filesystem tarball",
		Long: `Make a one-layer image named NAME:TAG from a plain root filesystem
tarball (uncompressed, gzip or zstd), like 'docker import'. Its config
sets only PATH; give the command to 'agentkernel run'.`,
		Example: `  tar -C ./rootfs -c . | gzip > rootfs.tar.gz
  agentkernel images import rootfs.tar.gz mytools:1
  agentkernel run --image mytools:1 -- /bin/sh -c 'echo hi'`,
		Args: imagesExactArgs(2, "a tarball and a NAME:TAG"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withImageStore(cmd, func(ctx context.Context, s *image.Store) error {
				sum, err := s.Import(ctx, args[0], args[1])
				if err != nil {
					return imageError(err)
				}
				fmt.Fprintf(a.Stdout, "%s@%s\n", sum.Ref, sum.Digest)
				return nil
			})
		},
	}
}

// imagesContext is the command's context, cancelled on SIGINT or SIGTERM
// so that an interrupted pull cleans up after itself.
// withImageStore runs fn with the image store open and a context that
// Ctrl-C or SIGTERM cancels, and closes the store afterwards.
func (a *App) withImageStore(cmd *cobra.Command, fn func(ctx context.Context, s *image.Store) error) error {
	ctx, stop := imagesContext(cmd)
	defer stop()
	s, err := a.openImageStore()
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(ctx, s)
}

func imagesContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmdContext(cmd)
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

func writeImagesJSON(a *App, v any) error {
	enc := json.NewEncoder(a.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func imagesPlural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// imagesExactArgs is cobra.ExactArgs with a usage error that says what is
// missing.
func imagesExactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("%s: expected %s (got %d arguments)", cmd.CommandPath(), what, len(args))
		}
		return nil
	}
}

func imagesMinArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError("%s: expected %s", cmd.CommandPath(), what)
		}
		return nil
	}
}
