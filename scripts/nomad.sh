#!/usr/bin/env bash
# Builds a Nomad agent for the nomad backend's tests (-B nomad), from the Go
# module proxy, into a cache, and prints the cache directory. A binary
# already in the cache is reused. The tests run it as `nomad agent -dev` on
# loopback and find it at the same cache path (or through
# AGENTKERNEL_NOMAD_DIR).
#
# Nomad is under the BUSL licence, not an open-source one: it is built here
# for tests only and never shipped, vendored or linked into agentkernel.
# The build runs in scripts/nomad, a module of its own (see its go.mod).
#
# With --cached it builds nothing: it prints the cache directory when the
# binary is there, or fails.
#
# Environment:
#   AGENTKERNEL_NOMAD_CACHE  the cache directory
#                            (default /var/cache/agentkernel as root,
#                            else ~/.cache/agentkernel)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

version=$(awk '$1=="require" && $2=="github.com/hashicorp/nomad"{print $3}' scripts/nomad/go.mod)
[ -n "$version" ] || { echo "nomad.sh: no github.com/hashicorp/nomad version in scripts/nomad/go.mod" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then
  default_cache=/var/cache/agentkernel
else
  default_cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/agentkernel
fi
cache=${AGENTKERNEL_NOMAD_CACHE:-$default_cache}
dir=$cache/nomad-$version

if [ -x "$dir/nomad" ] && "$dir/nomad" version >/dev/null 2>&1; then
  echo "$dir"
  exit 0
fi
if [ "${1:-}" = --cached ]; then
  exit 1
fi
command -v go >/dev/null || { echo "nomad.sh: go not found in PATH" >&2; exit 1; }
mkdir -p "$dir"
# One build at a time per cache directory: a second waits for the first,
# then finds its binaries. Under the lock, what a build killed outright
# (SIGKILL, no trap) left is removed.
exec 9>"$dir/.lock"
flock 9
if [ -x "$dir/nomad" ] && "$dir/nomad" version >/dev/null 2>&1; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir"/.build.*
# Built into a private directory, then renamed into place: a build killed
# half-way leaves nothing behind.
work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "nomad.sh: building nomad $version (several minutes on a small machine)" >&2
(cd scripts/nomad && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" \
  go build -trimpath -o "$work/nomad" github.com/hashicorp/nomad)
"$work/nomad" version >/dev/null
mv -f "$work/nomad" "$dir/nomad"
echo "$dir"
