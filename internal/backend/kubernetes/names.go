package kubernetes

import (
	"time"

	"github.com/agentkernel/agentkernel/internal/config"
)

// Labels and annotations on every object this backend makes. Selectors
// always include ManagedLabel, so that nothing of anyone else's is ever
// listed, adopted or deleted.
const (
	SandboxLabel = "agentkernel.io/sandbox"
	ManagedLabel = "agentkernel.io/managed-by"
	ManagedValue = "agentkernel"
	// PoolLabel marks a warm pod waiting in the named pool; adoption
	// replaces it with SandboxLabel.
	PoolLabel = "agentkernel.io/pool"
	// ProfileLabel is the security profile the pod was made with.
	ProfileLabel = "agentkernel.io/profile"
	// OwnerLabel says a sandbox belongs to the AgentSandbox object of the
	// same name (the custom resource), which the reconciler then owns.
	OwnerLabel = "agentkernel.io/owner"

	ExpiresAnnotation = "agentkernel.io/expires-at" // RFC 3339, UTC
	ImageAnnotation   = "agentkernel.io/image"
	NetworkAnnotation = "agentkernel.io/network"

	// objectPrefix starts the names of the pods and NetworkPolicies made
	// for sandboxes.
	objectPrefix = "agentkernel-"
	// MaxNameLen keeps objectPrefix+name within a DNS label (63).
	MaxNameLen = 63 - len(objectPrefix)
)

// ValidName checks a sandbox name before any API call: a DNS label (RFC
// 1123: lower-case letters, digits and '-', starting and ending with a
// letter or digit) of at most MaxNameLen characters, since the name
// becomes part of object names and a label value.
func ValidName(name string) error {
	return config.ValidateDNSLabelName(name, MaxNameLen, "kubernetes")
}

// PodName and PolicyName are the names of a sandbox's pod (when created
// for it, not adopted from a pool) and of its NetworkPolicy.
func PodName(name string) string    { return objectPrefix + name }
func PolicyName(name string) string { return objectPrefix + name }

// poolPolicyName is the NetworkPolicy that isolates a pool's waiting pods.
func poolPolicyName(pool string) string { return objectPrefix + "pool-" + pool }

// expiresAt reads ExpiresAnnotation; ok is false when there is none or
// it cannot be read (such an object never expires: a hand-edited
// annotation must not delete it).
func expiresAt(ann map[string]string) (time.Time, bool) {
	v, found := ann[ExpiresAnnotation]
	if !found {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}
