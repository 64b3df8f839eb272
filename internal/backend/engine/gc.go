package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/moby/moby/client"
)

// GC removes what runs and persistent sandboxes' supervisors of any
// data directory left on these engines when they died (killed
// mid-run): every container labelled agentkernel.managed whose owner
// process (LabelOwner) is gone, with its copy-on-write volumes and, for
// a run of dataDir, its directory under dataDir/engine; then the
// directories under dataDir/engine on which those runs attached their
// writable binds' idmapped clones (owned_linux.go) whose process died,
// with those mounts in the answering daemons' mount namespaces and in
// this one. Containers whose owner runs, and directories whose run
// holds their lock, are never touched; an engine that does not answer
// is skipped (it has nothing of ours that can be removed now). It
// returns what it removed.
func GC(ctx context.Context, dataDir string, engines ...*Backend) ([]string, error) {
	var removed []string
	var errs []error
	var daemons []int
	for _, b := range engines {
		cli, err := client.New(client.WithHost(b.host), client.WithAPIVersionNegotiation())
		if err != nil {
			continue
		}
		l, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: client.Filters{}.Add("label", LabelManaged+"=true")})
		if err != nil {
			cli.Close()
			if !client.IsErrConnectionFailed(err) {
				errs = append(errs, b.engineError("listing containers", err))
			}
			continue
		}
		if pid, err := b.daemonPid(); err == nil {
			daemons = append(daemons, pid)
		}
		for _, c := range l.Items {
			owner, ok := c.Labels[LabelOwner]
			if !ok || ownerAlive(owner) {
				continue
			}
			if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
				errs = append(errs, b.engineError("removing container "+c.ID[:12], err))
				continue
			}
			removed = append(removed, b.name+" container "+c.ID[:12])
			id := c.Labels[LabelID]
			if id == "" {
				continue
			}
			vl, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: client.Filters{}.Add("label", LabelID+"="+id)})
			if err == nil {
				for _, v := range vl.Items {
					if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err == nil {
						removed = append(removed, b.name+" volume "+v.Name)
					}
				}
			}
			if validID(id) && dataDir != "" {
				dirs, _ := filepath.Glob(filepath.Join(dataDir, "engine", "agentkernel-"+id+".*"))
				for _, d := range dirs {
					if err := os.RemoveAll(d); err != nil {
						errs = append(errs, err)
					} else {
						removed = append(removed, d)
					}
				}
			}
		}
		cli.Close()
	}
	// The writable binds' idmapped clones (ownedBinds) of runs that
	// died, once their containers are gone.
	more, err := gcOwned(dataDir, daemons)
	return append(removed, more...), errors.Join(append(errs, err)...)
}
