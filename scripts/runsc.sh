#!/usr/bin/env bash
# Builds runsc, gVisor's OCI runtime, for the gvisor backend (-B gvisor)
# at the version pinned below, from the Go module proxy, into a cache, and
# prints its path. A runsc already in the cache is reused. .ci/run calls it
# before the test suite; the backend and its tests find runsc at the same
# cache path (or through AGENTKERNEL_RUNSC).
#
# Why not the distribution's runsc: Debian's is years older and lacks the
# systrap platform the backend uses on kernels without KVM.
#
# runsc is pure Go and builds with CGO_ENABLED=0: a static binary that
# needs nothing on the host but the kernel.
#
# With --cached it builds nothing: it prints the cached runsc's path, or
# fails when there is none.
#
# Environment:
#   AGENTKERNEL_RUNSC_CACHE  the cache directory
#                            (default /var/cache/agentkernel as root,
#                            else ~/.cache/agentkernel)
#   AGENTKERNEL_RUNSC_VERSION  the module version to build (default: the pin)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

# The same gVisor version as the module go.mod requires (the user-space
# network stack), so one download serves both.
version=${AGENTKERNEL_RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
if [ "$(id -u)" = 0 ]; then
  default_cache=/var/cache/agentkernel
else
  default_cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/agentkernel
fi
cache=${AGENTKERNEL_RUNSC_CACHE:-$default_cache}
dir=$cache/runsc-$version
bin=$dir/runsc

if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
if [ "${1:-}" = --cached ]; then
  exit 1
fi
command -v go >/dev/null || { echo "runsc.sh: go not found in PATH" >&2; exit 1; }
mkdir -p "$dir"
# One build at a time per cache directory: a second waits for the first,
# then finds its runsc. Under the lock, what a build killed outright
# (SIGKILL, no trap) left is removed.
exec 9>"$dir/.lock"
flock 9
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
rm -rf "$dir"/.build.*
# Built into a private directory, then renamed into place: a build killed
# half-way leaves no runsc behind.
work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "runsc.sh: building gvisor.dev/gvisor/runsc@$version (several minutes)" >&2
# Outside any module: go install pkg@version builds the package from the
# proxy with the module's own go.mod, not ours.
(cd "$work" && CGO_ENABLED=0 GOBIN="$work" GOFLAGS=-buildvcs=false \
  go install -trimpath "gvisor.dev/gvisor/runsc@$version")
"$work/runsc" --version >/dev/null
mv -f "$work/runsc" "$bin"
echo "$bin"
