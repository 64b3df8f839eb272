package gvisor

import (
	"strings"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

var _ sandbox.CgroupRemover = (*Backend)(nil)

// RemoveCgroups removes the cgroups runsc made for the persistent
// sandbox whose id is id (sandbox.CgroupRemover), which a supervisor
// killed with its runsc leaves behind, and returns the directories it
// removed. Only empty cgroups go: a sandbox still running keeps its own.
func (b *Backend) RemoveCgroups(id string) []string {
	if id == "" || strings.ContainsAny(id, "/ \x00") || id == "." || id == ".." {
		return nil
	}
	removed, _ := removeCgroupDirs(cgroupName("agentkernel-" + id))
	return removed
}
