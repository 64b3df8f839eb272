// Package idle is PID 1 of a persistent sandbox on a container engine
// (docker, podman): a static program of a few hundred bytes that the
// backend bind-mounts read-only into the container and runs as its
// command, since the image may have no sleep and no shell. It reaps
// orphans, passes a stop's SIGTERM on to the sandbox's other processes,
// and does nothing else (idle_amd64.S). Binary is "" where there is no
// build of it (architectures other than amd64).
package idle
