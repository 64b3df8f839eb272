package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// migratedDir is where MigrateLocal moves the files it has copied into
// the cluster, under the old records' directory.
const migratedDir = "migrated"

// MigrateLocal copies the records an earlier version kept as files
// (<data-dir>/kubernetes/<namespace>/<name>.json) into the cluster, once:
// each file whose record is now in the cluster (created here, or there
// already with the same id) is moved to the directory's migrated/, kept,
// never deleted. A file that cannot be read, or whose name is taken in
// the cluster by another sandbox, stays where it is, and a line says so;
// max_sandboxes does not apply (those sandboxes exist already). It
// returns one line per file, for the server's log.
func (s *Sandboxes) MigrateLocal(ctx context.Context) (moved, kept []string, err error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(s.dir, e.Name())
		if ValidName(name) != nil {
			kept = append(kept, fmt.Sprintf("%s: not a sandbox name of this backend, left as it is", path))
			continue
		}
		line, done, err := s.migrateOne(ctx, name, path)
		if err != nil {
			return moved, kept, err
		}
		if done {
			moved = append(moved, line)
		} else {
			kept = append(kept, line)
		}
	}
	return moved, kept, nil
}

func (s *Sandboxes) migrateOne(ctx context.Context, name, path string) (line string, done bool, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Info == nil || r.Spec == nil || r.Info.Name != name {
		return fmt.Sprintf("%s: cannot be read as a sandbox's record (%v), left as it is", path, err), false, nil
	}
	if _, err := s.insert(ctx, &r); err != nil {
		if !errors.Is(err, sandbox.ErrSandboxExists) {
			return "", false, err
		}
		there, _, lerr := s.load(ctx, name)
		if lerr != nil || there.Info.UUID != r.Info.UUID {
			return fmt.Sprintf("%s: the name %q is taken in namespace %s (by another sandbox or Secret): this record is left as it is", path, name, s.b.ns), false, nil
		}
	}
	dst := filepath.Join(s.dir, migratedDir)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", false, err
	}
	// A file moved there before under the name is not replaced.
	to := filepath.Join(dst, filepath.Base(path))
	for i := 1; ; i++ {
		if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
			break
		}
		to = filepath.Join(dst, fmt.Sprintf("%s.%d.json", name, i))
	}
	if err := os.Rename(path, to); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("sandbox %q: its record is now in namespace %s (the file moved to %s)", name, s.b.ns, dst), true, nil
}
