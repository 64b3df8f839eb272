package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// A copy-on-write mount is a volume of the engine's "local" driver
// whose mount is an overlay: the host directory its one read-only lower
// layer (under the mount's snapshot layers, if any), its upper and work
// directories agentkernel's, under the run's directory. The engine
// mounts it when the container starts and unmounts it when the container
// ends, in its own mount namespace, so the overlay never appears in the
// caller's mount table and the host directory is never written: the
// container's writes land in the upper directory, which goes with the
// run. Docker's and podman's local drivers take the same options (type,
// device, o), passed to mount(2) as they are. The engine must see the
// same file system as agentkernel (a local engine); a remote one cannot
// reach the directories (nor a bind mount's source).

// cowSource checks that a copy-on-write mount's paths can be written in
// the overlay's options: the kernel splits them at ',' and lowerdir at
// ':', and reads '\' as an escape.
func cowSource(p string) bool {
	return filepath.IsAbs(p) && !strings.ContainsAny(p, ",:\\\n")
}

// cowVolumes are the spec's writable copy-on-write mounts as engine
// volumes: created, each with its upper and work directories under dir
// (made when missing, kept when there: a persistent sandbox's), and the
// mounts that name them. remove removes the volumes (not dir).
func (b *Backend) cowVolumes(ctx context.Context, cli *client.Client, spec *sandbox.Spec, dir string) (mounts []mount.Mount, remove func(), err error) {
	var names []string
	remove = func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		for _, n := range names {
			if _, err := cli.VolumeRemove(rctx, n, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				b.opts.Warn(fmt.Sprintf("backend %s: removing volume %s: %v", b.name, n, err))
			}
		}
	}
	defer func() {
		if err != nil {
			remove()
		}
	}()
	for i, m := range spec.Mounts {
		if m.Kind != sandbox.MountCopyOnWrite || m.ReadOnly {
			continue
		}
		d := filepath.Join(dir, "cow"+strconv.Itoa(i))
		upper, work := filepath.Join(d, "upper"), filepath.Join(d, "work")
		if err := cowDirs(m.Source, d, upper, work); err != nil {
			return nil, remove, fmt.Errorf("backend %s: copy-on-write mount %s: %w", b.name, m.Dest, err)
		}
		lower := make([]string, 0, len(m.Layers)+1)
		for j := len(m.Layers) - 1; j >= 0; j-- {
			lower = append(lower, m.Layers[j])
		}
		lower = append(lower, m.Source)
		for _, p := range append([]string{upper, work}, lower...) {
			if !cowSource(p) {
				return nil, remove, b.unsupported("copy-on-write mount %s: the overlay's options cannot carry the path %q (',', ':', '\\' or a newline in it)", m.Dest, p)
			}
		}
		name := volumeName(spec, i)
		_, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{
			Name:   name,
			Driver: "local",
			DriverOpts: map[string]string{
				"type":   "overlay",
				"device": "overlay",
				"o":      "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + upper + ",workdir=" + work,
			},
			Labels: map[string]string{LabelManaged: "true", LabelID: spec.ID},
		})
		if err != nil {
			return nil, remove, b.engineError("creating the copy-on-write volume of "+m.Dest, err)
		}
		names = append(names, name)
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: name, Target: m.Dest,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true}})
	}
	return mounts, remove, nil
}

// volumeName is the name of the volume of spec's mount i.
func volumeName(spec *sandbox.Spec, i int) string {
	return "agentkernel-" + spec.ID + "-cow" + strconv.Itoa(i)
}

// cowDirs makes d, upper and work (kept when they exist), upper with
// src's owner and mode: the merged directory shows its upper layer's.
func cowDirs(src, d, upper, work string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return errors.New("the source must be a directory")
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	for _, p := range []string{upper, work} {
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	return os.Chmod(upper, fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky))
}
