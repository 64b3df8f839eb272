package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentkernel/agentkernel/internal/atomicfile"
	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/store"
)

// A running sandbox is frozen (the cgroup freezer) while a snapshot
// copies its writable layers, by the process that takes the snapshot (the
// CLI, or the API server). That process may die meanwhile (killed, out of
// memory): the kernel keeps the cgroup frozen. So the freeze is recorded
// in the sandbox's directory: the taker holds an flock on freeze.lock and
// writes the frozen file before it freezes, and removes the file once it
// has thawed. Whoever then finds the file with the lock free knows the
// taker is gone and thaws the sandbox (sandbox.Freezer's Thaw): the
// sandbox's supervisor, which watches the directory (guardFreeze), or,
// where that supervisor is gone too, the next Start or Stop, and the next
// take (thawLeftover).

const (
	frozenFile     = "frozen"
	freezeLockFile = "freeze.lock"
)

// withFrozen runs fn while the sandbox whose backend id is id (and whose
// directory is dir) is frozen.
func withFrozen(fz sandbox.Freezer, id, dir string, fn func() error) error {
	unlock, err := atomicfile.Lock(filepath.Join(dir, freezeLockFile))
	if err != nil {
		return err
	}
	defer unlock()
	marker := filepath.Join(dir, frozenFile)
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		return err
	}
	thaw, err := fz.Freeze(id, dir)
	if err != nil {
		_ = os.Remove(marker)
		return fmt.Errorf("freezing the sandbox: %w", err)
	}
	err = fn()
	if terr := thaw(); terr != nil {
		// The file stays: the supervisor tries again.
		return errors.Join(err, fmt.Errorf("thawing the sandbox: %w", terr))
	}
	_ = os.Remove(marker)
	return err
}

// thawIfAbandoned thaws the sandbox when dir records a freeze whose taker
// is gone, and reports whether the freeze is over (or there was none);
// false means a taker still holds it.
func thawIfAbandoned(fz sandbox.Freezer, id, dir string) (bool, error) {
	marker := filepath.Join(dir, frozenFile)
	if _, err := os.Lstat(marker); errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	unlock, ok, err := atomicfile.TryLock(filepath.Join(dir, freezeLockFile))
	if err != nil || !ok {
		return false, err
	}
	defer unlock()
	if _, err := os.Lstat(marker); errors.Is(err, fs.ErrNotExist) {
		return true, nil // thawed by its taker meanwhile
	}
	if err := fz.Thaw(id, dir); err != nil {
		return false, err
	}
	return true, os.Remove(marker)
}

// freezer is the Freezer of the sandboxes of backend (Spec.Backend):
// the Reclaimer's for native's, Freezers' for the others; nil for none.
func (m *Manager) freezer(backend string) sandbox.Freezer {
	if backend == "" || strings.EqualFold(backend, "native") {
		fz, _ := m.Reclaimer.(sandbox.Freezer)
		return fz
	}
	for name, fz := range m.Freezers {
		if strings.EqualFold(name, backend) {
			return fz
		}
	}
	return nil
}

// backendName is Spec.Backend as users name it.
func backendName(b string) string {
	if b == "" {
		return "native"
	}
	return b
}

// thawLeftover is thawIfAbandoned for the Manager, whose caller holds
// the sandbox's lock (no take of it can be under way).
func (m *Manager) thawLeftover(spec *sandbox.Spec, dir string) error {
	fz := m.freezer(spec.Backend)
	if fz == nil || spec.ID == "" {
		return nil
	}
	if _, err := thawIfAbandoned(fz, spec.ID, dir); err != nil {
		return fmt.Errorf("thawing the sandbox after a snapshot that did not finish: %w", err)
	}
	return nil
}

// guardFreeze watches dir for a freeze of the sandbox (id) whose taker
// dies before it thaws, and thaws it. It returns what stops the watch.
func guardFreeze(fz sandbox.Freezer, id, dir string) (stop func(), err error) {
	return watchDir(dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE, func() time.Duration {
		// While a freeze is recorded, look again every little while: its
		// taker's death shows only as the lock coming free.
		done, err := thawIfAbandoned(fz, id, dir)
		switch {
		case err != nil:
			return time.Second
		case !done:
			return 50 * time.Millisecond
		}
		return -1
	})
}

// thawSpec is thawLeftover for the sandbox sb (its lock held).
func (m *Manager) thawSpec(sb *store.Sandbox) error {
	var spec sandbox.Spec
	if err := json.Unmarshal(sb.Spec, &spec); err != nil {
		return nil // nothing a take could have frozen
	}
	spec.ID = SpecID(sb)
	return m.thawLeftover(&spec, m.Dir(sb.Name))
}
