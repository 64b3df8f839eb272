package sandbox

import (
	"context"
	"os"
)

// FileCopy is a host file copied into a persistent sandbox each time it
// starts (the configuration's [[files]]): Source on the host, read by
// the one who starts it; Dest in the sandbox (parents created), with
// Mode's permission bits.
type FileCopy struct {
	// Source is the host file's absolute path.
	Source string `json:"source"`
	// Within, when set, is a directory Source must stay inside (symlinks
	// included): the project directory whose agentkernel.toml named it.
	Within string      `json:"within,omitempty"`
	Dest   string      `json:"dest"`
	Mode   os.FileMode `json:"mode"`
}

// FileKeeper is a Store that keeps a sandbox's FileCopies with it and
// copies them in at each start. Create of a request with Files needs
// one (else ErrUnsupported).
type FileKeeper interface {
	// KeepFiles records files for the sandbox name (replacing any).
	KeepFiles(ctx context.Context, name string, files []FileCopy) error
}
