// Package engine runs sandboxes on a container engine, docker or podman,
// through the Docker Engine API (github.com/moby/moby/client); podman
// serves the same API on its own socket, so one backend type serves
// both, as two instances: "docker" (DOCKER_HOST, else
// /var/run/docker.sock) and "podman" (CONTAINER_HOST, else the user's
// or root's podman.sock).
//
// Why the API and not the engines' command lines: the API is the one
// both engines keep stable and documented; it gives typed errors (a
// missing daemon, a missing image, a command that cannot start) where a
// CLI gives text to parse; and it needs no docker or podman binary on
// the machine, only a socket, so the same code talks to a local daemon,
// a rootless podman or a remote engine. The package is plain client code
// (no namespaces, no cgroups of its own) and builds on every system.
//
// What a run does: the image comes from agentkernel's own store, never
// from the engine's registries. Each image is known to the engine under
// an agentkernel-owned tag made of its manifest digest
// (agentkernel.local/image:<hex>); when the engine lacks that tag the
// store writes the image as a `docker save` archive (Options.Archive,
// the store's exporter) straight into ImageLoad. The container gets the
// spec's command, environment, working directory, user and host name,
// and the profile's fences as the engine expresses them: every
// capability dropped but the spec's, no_new_privs, the spec's seccomp
// filter (the native backend's rules as docker's JSON profile,
// native.SeccompProfileJSON), a read-only root where the spec asks,
// memory (without swap), CPU and process limits, the spec's bind and
// tmpfs mounts, and no network (network mode "none"). A writable bind's
// source reaches the engine as an idmapped clone that agentkernel
// attaches in the daemon's mount namespace (owned_linux.go, package
// hostidmap): the container's root, host root on a rootful engine,
// stands there for the invoking user and its other ids for a block of
// host ids leased for the sandbox (a persistent sandbox's: reserved from
// its first start to its removal, native.PersistentIDs); its seccomp
// profile then also refuses set-id modes, xattrs and openat2
// (native.GuardSetid). What the engine
// cannot give is refused or, where [security] allow_degraded allows it,
// run without, with one warning: never silently weaker. Every container
// carries the labels agentkernel.managed=true and agentkernel.id, and is
// removed when the run ends, also when it fails or is cancelled.
package engine
