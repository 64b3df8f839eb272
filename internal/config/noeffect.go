package config

import "strings"

// noEffect names the keys that the schema accepts (upstream's files use
// them) but that change nothing in this build, with why, by key or by
// table prefix ("build" covers build.*). 'config show' marks them, so
// that no one reads a value there as if it worked.
var noEffect = []struct{ prefix, why string }{
	{"agent.preferred", "informational: nothing reads it"},
	{"network.vsock_cid", "accepted for upstream compatibility: the embedded backend has no vsock"},
	{"build", "building images from a Dockerfile is not supported yet: use --image with a pulled image, or 'agentkernel images load' a tarball"},
	{"daemon.agents", "per-mode pool sizes are not applied: daemon.min_warm and daemon.max_warm size every pool"},
	{"orchestrator.provider", "the backend is chosen with -B kubernetes on each command"},
	{"orchestrator.warm_pool_size", "kubernetes warm pools are AgentSandboxPool objects or 'pool fill -B kubernetes'"},
	{"orchestrator.warm_pool_images", "kubernetes warm pools are AgentSandboxPool objects or 'pool fill -B kubernetes'"},
}

// NoEffect reports why key (a dotted key as Values lists it) has no
// effect in this build, or "" when it does.
func NoEffect(key string) string {
	for _, n := range noEffect {
		if key == n.prefix || strings.HasPrefix(key, n.prefix+".") || strings.HasPrefix(key, n.prefix+"[") {
			return n.why
		}
	}
	return ""
}

// NoEffectGroups lists the prefixes NoEffect knows, in schema order,
// each with its reason.
func NoEffectGroups() [][2]string {
	out := make([][2]string, len(noEffect))
	for i, n := range noEffect {
		out[i] = [2]string{n.prefix, n.why}
	}
	return out
}
