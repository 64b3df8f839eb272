package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

var _ sandbox.Freezer = (*Backend)(nil)

// Freeze holds every process of the running persistent sandbox whose id
// is id and whose directory is dir still (sandbox.Freezer), while a
// snapshot copies its writable layers: `runsc pause` stops every task
// of gVisor's kernel; thaw is `runsc resume`. The sandbox's writes
// reach its writable layer through the gofer as they are made
// (--overlay2=none, --file-access=shared), so what the copy reads is
// what the sandbox last wrote.
func (b *Backend) Freeze(id, dir string) (func() error, error) {
	runsc, err := findRunsc()
	if err != nil {
		return nil, err
	}
	if id == "" || strings.ContainsAny(id, "/ \x00") || id == "." || id == ".." {
		return nil, fmt.Errorf("the gvisor backend: sandbox id %q", id)
	}
	state, cid := filepath.Join(dir, "gvisor", "state"), "agentkernel-"+id
	if out, err := exec.Command(runsc, "--root", state, "pause", cid).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("runsc pause: %s", runscOutput(out, err))
	}
	return func() error {
		if out, err := exec.Command(runsc, "--root", state, "resume", cid).CombinedOutput(); err != nil {
			return fmt.Errorf("runsc resume: %s", runscOutput(out, err))
		}
		return nil
	}, nil
}

// Thaw resumes the sandbox whose id is id where a Freeze was left in
// place (sandbox.Freezer): runsc reports it paused. A sandbox that is
// not running under runsc, or not paused, is left as it is.
func (b *Backend) Thaw(id, dir string) error {
	if id == "" || strings.ContainsAny(id, "/ \x00") {
		return fmt.Errorf("the gvisor backend: sandbox id %q", id)
	}
	state, cid := filepath.Join(dir, "gvisor", "state"), "agentkernel-"+id
	if _, err := os.Stat(state); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	runsc, err := findRunsc()
	if err != nil {
		return err
	}
	out, err := exec.Command(runsc, "--root", state, "state", cid).Output()
	if err != nil {
		return nil // no such container: nothing to thaw
	}
	var st struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(out, &st) != nil || st.Status != "paused" {
		return nil
	}
	if out, err := exec.Command(runsc, "--root", state, "resume", cid).CombinedOutput(); err != nil {
		return fmt.Errorf("runsc resume: %s", runscOutput(out, err))
	}
	return nil
}

// runscOutput is what a failed runsc command said, on one line.
func runscOutput(out []byte, err error) string {
	msg := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	if msg == "" {
		return err.Error()
	}
	return msg
}
