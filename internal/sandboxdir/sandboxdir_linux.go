package sandboxdir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentkernel/agentkernel/internal/agent"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// Dir is the directory of the sandbox called name under dataDir. The
// name is checked first (sandbox.ValidateName): it becomes a path.
func Dir(dataDir, name string) (string, error) {
	if err := sandbox.ValidateName(name); err != nil {
		return "", err
	}
	return filepath.Join(dataDir, "sandboxes", name), nil
}

// Dial connects to the agent of the sandbox whose directory is dir. It
// fails when the sandbox is not running (no socket, or nobody listening).
func Dial(dir string) (*agent.Client, error) {
	return agent.Dial(filepath.Join(dir, "sock"))
}

// ReadSpec reads the spec the sandbox called name, whose directory is
// dir, runs with. A missing file is an error wrapping fs.ErrNotExist.
func ReadSpec(dir, name string) (*sandbox.Spec, error) {
	b, err := os.ReadFile(filepath.Join(dir, "spec.json"))
	if err != nil {
		return nil, err
	}
	var spec sandbox.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("the spec of sandbox %q: %w", name, err)
	}
	return &spec, nil
}
