#!/usr/bin/env bash
# Builds kube-apiserver and etcd, the API half of a Kubernetes control
# plane, and kube-scheduler, kubelet and the CNI plugins bridge,
# host-local and loopback (cni/), a node for containerd to run pods on,
# for the kubernetes backend's tests (-B kubernetes), from the Go module
# proxy, into a cache, and prints the cache directory. Binaries already in
# the cache are reused. .ci/run calls it before the test suite;
# the tests find the binaries at the same cache path (or through
# AGENTKERNEL_KUBE_DIR).
#
# The build runs in scripts/kube, a module of its own: k8s.io/kubernetes
# names its staging modules (k8s.io/api, client-go, ...) by paths inside its
# repository, so `go install k8s.io/kubernetes/cmd/kube-apiserver@v` is
# refused; scripts/kube/go.mod replaces them by their published versions.
# etcd is the version k8s.io/kubernetes itself requires (go.mod there).
#
# The CNI plugins come from scripts/kube/cni, a module of its own, so
# that their dependencies do not move the Kubernetes build's.
#
# All are pure Go and built with CGO_ENABLED=0: static binaries.
#
# With --cached it builds nothing: it prints the cache directory when all
# binaries are there, or fails.
#
# Environment:
#   AGENTKERNEL_KUBE_CACHE  the cache directory
#                           (default /var/cache/agentkernel as root,
#                           else ~/.cache/agentkernel)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

# The kubernetes version in scripts/kube/go.mod.
version=$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/{print $2} $1=="require" && $2=="k8s.io/kubernetes"{print $3}' scripts/kube/go.mod)
[ -n "$version" ] || { echo "kube.sh: no k8s.io/kubernetes version in scripts/kube/go.mod" >&2; exit 1; }
if [ "$(id -u)" = 0 ]; then
  default_cache=/var/cache/agentkernel
else
  default_cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/agentkernel
fi
cache=${AGENTKERNEL_KUBE_CACHE:-$default_cache}
dir=$cache/kube-$version

bins=(kube-apiserver etcd kube-scheduler kubelet)
cnis=(bridge host-local loopback)
have() {
  local b
  for b in kube-apiserver kube-scheduler kubelet etcd; do
    [ -x "$dir/$b" ] && "$dir/$b" --version >/dev/null 2>&1 || return 1
  done
  for b in "${cnis[@]}"; do [ -x "$dir/cni/$b" ] || return 1; done
}
if have; then
  echo "$dir"
  exit 0
fi
if [ "${1:-}" = --cached ]; then
  exit 1
fi
command -v go >/dev/null || { echo "kube.sh: go not found in PATH" >&2; exit 1; }
mkdir -p "$dir/cni"
# One build at a time per cache directory: a second waits for the first,
# then finds its binaries. Under the lock, what a build killed outright
# (SIGKILL, no trap) left is removed.
exec 9>"$dir/.lock"
flock 9
if have; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir"/.build.*
# Built into a private directory, then renamed into place: a build killed
# half-way leaves nothing behind.
work=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "kube.sh: building Kubernetes $version (kube-apiserver, kube-scheduler, kubelet), etcd and CNI plugins (10 minutes or more on a small machine)" >&2
# The version the binaries report (/version, --version), which
# Kubernetes' own build scripts stamp in the same way.
minor=${version#v1.}
minor=${minor%%.*}
ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"
for b in "${bins[@]}"; do
  if [ -x "$dir/$b" ] && "$dir/$b" --version >/dev/null 2>&1; then continue; fi
  case $b in
  etcd) pkg=go.etcd.io/etcd/server/v3 ;;
  *) pkg=k8s.io/kubernetes/cmd/$b ;;
  esac
  (cd scripts/kube && go build -trimpath -ldflags "$ldflags" -o "$work/$b" "$pkg")
  "$work/$b" --version >/dev/null
  mv -f "$work/$b" "$dir/$b"
done
for b in "${cnis[@]}"; do
  [ -x "$dir/cni/$b" ] && continue
  case $b in
  host-local) pkg=ipam/host-local ;;
  *) pkg=main/$b ;;
  esac
  (cd scripts/kube/cni && go build -trimpath -o "$work/$b" "github.com/containernetworking/plugins/plugins/$pkg")
  mv -f "$work/$b" "$dir/cni/$b"
done
echo "$dir"
