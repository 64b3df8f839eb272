// Package bootprep makes a prepared sandbox (sandbox.Prepared, the warm
// pools) out of a booted one: the backends whose persistent sandboxes
// run an idle PID 1 and take their commands beside it (gvisor through
// `runsc exec`, docker and podman through the engine's exec) prepare a
// pooled sandbox by booting it, with every part of the spec but the
// command, and run its one command as such an exec. The sandbox is torn
// down once that command has ended: one sandbox, one command, as an
// ephemeral run.
package bootprep
