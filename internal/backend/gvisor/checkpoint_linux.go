package gvisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

var _ sandbox.Checkpointer = (*Backend)(nil)

// Checkpoint writes the memory of the running persistent sandbox spec
// describes, whose directory is dir, into to (sandbox.Checkpointer),
// while Freeze holds it still: `runsc checkpoint --leave-running` of the
// sandbox into to/image (it stays paused, and runs on at the thaw), and
// the process of each detached command, a container of the sandbox
// (detached_linux.go), into to/containers/<ID>.json, which a restore
// needs to make its bundle. It returns those commands' ids.
//
// A sandbox with a network keeps it: the restored sandbox boots with a
// network helper and device of its own, as every boot does, and gVisor's
// stack (its addresses, listening sockets) comes back over them. A
// sandbox with secrets is refused: a restored sandbox gets a CA of its
// own, which the processes that come back, having read the old one,
// would not trust.
func (b *Backend) Checkpoint(spec *sandbox.Spec, dir, to string) ([]string, error) {
	if spec.Secrets != nil || spec.SecretBindings != nil && len(spec.SecretBindings.Bindings) > 0 {
		return nil, fmt.Errorf("memory snapshots of gvisor sandboxes with secrets (-S) are not supported: a restored sandbox gets a CA of its own, which its processes would not trust; take one without --memory: %w", sandbox.ErrUnsupported)
	}
	id := spec.ID
	if id == "" || strings.ContainsAny(id, "/ \x00") || id == "." || id == ".." {
		return nil, fmt.Errorf("the gvisor backend: sandbox id %q", id)
	}
	runsc, err := findRunsc()
	if err != nil {
		return nil, err
	}
	state, cid := filepath.Join(dir, "gvisor", "state"), "agentkernel-"+id
	// runsc writes the image's files readable by all: they stay in a
	// directory only root may enter.
	if err := os.Mkdir(to, 0o700); err != nil {
		return nil, err
	}
	out, err := exec.Command(runsc, "--root", state, "list", "--format", "json").Output()
	if err != nil {
		return nil, fmt.Errorf("runsc list: %w", err)
	}
	var list []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &list); err != nil {
		return nil, fmt.Errorf("runsc list: %w", err)
	}
	var ids []string
	if err := os.Mkdir(filepath.Join(to, "containers"), 0o700); err != nil {
		return nil, err
	}
	for _, c := range list {
		did, ok := strings.CutPrefix(c.ID, detachedPrefix)
		if !ok || sandbox.ValidDetachedID(did) != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "gvisor", "d-"+did, "config.json"))
		if err != nil {
			return nil, fmt.Errorf("detached command %s: %w", did, err)
		}
		var s specs.Spec
		if err := json.Unmarshal(b, &s); err != nil || s.Process == nil {
			return nil, fmt.Errorf("detached command %s: its bundle: %v", did, err)
		}
		pb, err := json.Marshal(s.Process)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(to, "containers", did+".json"), pb, 0o600); err != nil {
			return nil, err
		}
		ids = append(ids, did)
	}
	img := filepath.Join(to, "image")
	if err := os.Mkdir(img, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.Command(runsc, "--root", state, "checkpoint", "--leave-running", "--image-path", img, cid).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runsc checkpoint: %s", runscOutput(out, err))
	}
	return ids, nil
}
