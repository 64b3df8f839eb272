package nomad

import (
	"fmt"
	"time"

	"github.com/agentkernel/agentkernel/internal/config"
)

// Meta keys on every job this backend makes. List and Reap only ever
// look at jobs with ManagedMeta=ManagedValue, so that nothing of anyone
// else's is ever listed or deregistered.
const (
	ManagedMeta  = "agentkernel.managed-by"
	ManagedValue = "agentkernel"
	SandboxMeta  = "agentkernel.sandbox"
	ProfileMeta  = "agentkernel.profile"
	NetworkMeta  = "agentkernel.network"
	DriverMeta   = "agentkernel.driver"
	ExpiresMeta  = "agentkernel.expires-at" // RFC 3339, UTC
	// OwnerMeta is the backend id (sandbox.Spec.ID) of the persistent
	// sandbox of an HTTP API server whose job this is: its next boot
	// replaces a job its earlier, killed supervisor left.
	OwnerMeta = "agentkernel.owner"
	// LabelMetaPrefix starts the meta key of each user label.
	LabelMetaPrefix = "agentkernel.label."

	jobPrefix = "agentkernel-"
	// MaxNameLen keeps job IDs short and the name usable as a DNS label
	// by the node's agentkernel.
	MaxNameLen = 63 - len(jobPrefix)
	// TaskName is the one task of a sandbox's job (and its group's name).
	TaskName = "sandbox"
)

// ValidName checks a sandbox name before any request: a DNS label
// (lower-case letters, digits and '-', starting and ending with a letter
// or digit) of at most MaxNameLen characters. The name becomes a job ID,
// a meta value and an argument of the node's agentkernel, so nothing
// else is let through.
func ValidName(name string) error {
	return config.ValidateDNSLabelName(name, MaxNameLen, "nomad")
}

// JobID is the ID of a sandbox's job.
func JobID(name string) string { return jobPrefix + name }

// validLabelKey accepts label keys that are safe as meta keys.
func validLabelKey(k string) error {
	if k == "" || len(k) > 63 {
		return fmt.Errorf("label key %q: 1 to 63 characters", k)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("label key %q: letters, digits, '-' and '_' only", k)
		}
	}
	return nil
}

// expiresAt reads ExpiresMeta; ok is false when there is none or it
// cannot be read (such a job never expires: a hand-edited value must not
// delete it).
func expiresAt(meta map[string]string) (time.Time, bool) {
	v, found := meta[ExpiresMeta]
	if !found {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}
