#!/usr/bin/env bash
# The whole test suite: formatting, vet, the macOS build, every Go test
# (real namespaces and mounts: run as root for full coverage) and a short
# run of every fuzz target. Installs the Debian packages the tests use when
# it runs as root and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
# A test whose prerequisite (root, a tool) is missing fails here instead of
# skipping (internal/testenv).
export AGENTKERNEL_TEST_STRICT=1
FUZZTIME=${FUZZTIME:-10s}
FUZZCOUNT=${FUZZCOUNT:-5000x}

# The Debian packages the tests use: busybox-static (test images), uidmap
# (newuidmap/newgidmap), util-linux (setpriv, unshare), passwd (useradd,
# usermod), chromium (the browser tests), and the clients the network
# tests drive in internal/testenv/netlab's namespaces: iproute2 (ip), curl,
# git (and git http-backend), python3 and pip, nodejs (fetch, npm);
# docker.io (dockerd) and podman, whose private daemons the docker and
# podman backends' tests start (internal/backend/engine, test/e2e);
# containerd (with ctr) and runc, the container runtime of the kubernetes
# backend's test node (internal/testenv/kubelab). The one list: .ci/run
# installs what `scripts/test.sh --packages` prints.
# npm comes last, and only where nodejs did not bring it (NodeSource's
# nodejs holds npm and conflicts with Debian's).
packages=(busybox-static uidmap util-linux passwd chromium iproute2 curl git python3 python3-pip nodejs docker.io podman containerd runc)
if [ "${1:-}" = --packages ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if ! command -v npm >/dev/null; then
    echo "== installing npm"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null
  fi
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

if command -v as >/dev/null && command -v ld >/dev/null; then
  echo "== exec stub and idle program match their assembly sources"
  stubdir=$(mktemp -d)
  as --64 -o "$stubdir/s.o" internal/backend/native/stub/execstub_amd64.S
  ld -static -n -s --build-id=none -e _start -o "$stubdir/s.bin" "$stubdir/s.o"
  cmp "$stubdir/s.bin" internal/backend/native/stub/execstub_amd64.bin || { echo "stub/execstub_amd64.bin is stale: go generate ./internal/backend/native/..."; exit 1; }
  as --64 -o "$stubdir/i.o" internal/backend/engine/idle/idle_amd64.S
  ld -static -n -s --build-id=none -e _start -o "$stubdir/i.bin" "$stubdir/i.o"
  cmp "$stubdir/i.bin" internal/backend/engine/idle/idle_amd64.bin || { echo "engine/idle/idle_amd64.bin is stale: go generate ./internal/backend/engine/idle"; exit 1; }
  rm -rf "$stubdir"
fi

echo "== go vet"
go vet ./...

echo "== GOOS=darwin go build and vet"
GOOS=darwin go build ./...
GOOS=darwin go vet ./...

echo "== GOARCH=arm64 go build and vet, GOARCH=386 go build"
GOOS=linux GOARCH=arm64 go build ./...
GOOS=linux GOARCH=arm64 go vet ./...
GOOS=linux GOARCH=386 go build ./...

echo "== go build"
go build -o bin/agentkernel ./cmd/agentkernel

# runsc (gVisor), which the gvisor backend's tests run: AGENTKERNEL_RUNSC,
# or the one scripts/runsc.sh built into its cache. Building it takes
# minutes, so this script does not: .ci/run does (cached), before it. With
# no runsc the gvisor backend's tests are left out, and this says so.
gvisor_out=()
if [ "$(uname -s)" = Linux ] && [ -z "${AGENTKERNEL_RUNSC:-}" ]; then
  if AGENTKERNEL_RUNSC=$(./scripts/runsc.sh --cached); then
    export AGENTKERNEL_RUNSC
  else
    unset AGENTKERNEL_RUNSC
    echo "== NOTE: no runsc: the gvisor backend's tests are LEFT OUT of this run"
    echo "   (./scripts/runsc.sh builds it once, in a few minutes; .ci/run does, and runs them)"
    gvisor_out=(-skip '^TestGVisor')
    # The contract suites run every backend but this one.
    export ATTACK_BACKENDS=docker,podman AGENTKERNEL_CONTRACT_BACKENDS=native,docker,podman
  fi
fi

# kube-apiserver and etcd, which the kubernetes backend's tests start on
# loopback, and kube-scheduler, kubelet and the CNI plugins of their node:
# AGENTKERNEL_KUBE_DIR, or the ones scripts/kube.sh built into its cache. Building them takes many minutes, so this script does not:
# .ci/run does (cached), before it. Without them those tests are left
# out, and this says so.
kube_out=()
kube_skip=
if [ "$(uname -s)" = Linux ] && [ -z "${AGENTKERNEL_KUBE_DIR:-}" ]; then
  if AGENTKERNEL_KUBE_DIR=$(./scripts/kube.sh --cached); then
    export AGENTKERNEL_KUBE_DIR
  else
    unset AGENTKERNEL_KUBE_DIR
    echo "== NOTE: no kube-apiserver: the kubernetes backend's tests are LEFT OUT of this run"
    echo "   (./scripts/kube.sh builds it, etcd and a node's kubelet once, 10 to 20 minutes on 2 cores; .ci/run does, and runs them)"
    kube_out=('/internal/backend/kubernetes$' '/internal/kubecli$' '/internal/testenv/kubelab$')
    kube_skip='^TestKubernetes'
  fi
fi

# The Nomad agent (test-only: Nomad is not open source, so it is never
# shipped) that the nomad backend's tests run as `nomad agent -dev` on
# loopback: AGENTKERNEL_NOMAD_DIR, or the one scripts/nomad.sh built into
# its cache. Building it takes many minutes, so this script does not:
# .ci/run does (cached), before it. Without it those tests are left out,
# and this says so.
nomad_out=()
nomad_skip=
if [ "$(uname -s)" = Linux ] && [ -z "${AGENTKERNEL_NOMAD_DIR:-}" ]; then
  if AGENTKERNEL_NOMAD_DIR=$(./scripts/nomad.sh --cached); then
    export AGENTKERNEL_NOMAD_DIR
  else
    unset AGENTKERNEL_NOMAD_DIR
    echo "== NOTE: no Nomad agent: the nomad backend's tests are LEFT OUT of this run"
    echo "   (./scripts/nomad.sh builds it once, 10 to 20 minutes on 2 cores; .ci/run does, and runs them)"
    nomad_out=('/internal/backend/nomad$')
    nomad_skip='^TestNomad'
  fi
fi

echo "== go test"
pkgs=$(go list ./...)
skip=()
if [ ${#gvisor_out[@]} -gt 0 ]; then
  pkgs=$(grep -v '/internal/backend/gvisor$' <<<"$pkgs")
  skip+=('^TestGVisor')
fi
for re in "${kube_out[@]}" "${nomad_out[@]}"; do
  pkgs=$(grep -v "$re" <<<"$pkgs")
done
if [ -n "$kube_skip" ]; then skip+=("$kube_skip"); fi
if [ -n "$nomad_skip" ]; then skip+=("$nomad_skip"); fi
# The attack battery through gvisor, docker and podman takes 10 minutes
# more: .ci/run runs it after this suite (native's battery runs here).
skip+=('^TestAttackBackends$')
echo "== NOTE: the attack battery through gvisor, docker and podman (TestAttackBackends) is left to .ci/run, after this suite"
skip_args=()
if [ ${#skip[@]} -gt 0 ]; then
  skip_args=(-skip "$(IFS='|'; echo "${skip[*]}")")
fi
# shellcheck disable=SC2086
go test -count=1 -timeout 20m "${skip_args[@]}" $pkgs

# fuzz_one PKG TARGET: fuzz one target for $FUZZTIME. A time-bounded run of
# Go's fuzzing coordinator (up to Go 1.26) can end with a bare "context
# deadline exceeded" failure at the deadline although no input failed
# (go.dev/issue/75804). Such a run (that message, and no failing input
# written under testdata/fuzz) is repeated once with a fixed number of
# executions, which has no deadline; any other failure fails the suite.
fuzz_one() {
  local pkg=$1 target=$2 dir log rc=0
  dir=$(go list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$target
  log=$(mktemp)
  local before
  before=$(ls "$dir" 2>/dev/null | sort || true)
  go test -run "^$" -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s "$pkg" 2>&1 | tee "$log" || rc=$?
  if [ "$rc" != 0 ]; then
    local after
    after=$(ls "$dir" 2>/dev/null | sort || true)
    if [ "$before" = "$after" ] && grep -q '^    context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"; then
      echo "-- $target: the fuzzing coordinator stopped at its deadline with no failing input (go.dev/issue/75804); repeating with $FUZZCOUNT executions"
      rm -f "$log"
      go test -run "^$" -fuzz "^${target}\$" -fuzztime "$FUZZCOUNT" -fuzzminimizetime 200x "$pkg"
      return
    fi
    rm -f "$log"
    return "$rc"
  fi
  rm -f "$log"
}

echo "== fuzz ($FUZZTIME per target)"
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "-- $pkg $target"
    fuzz_one "$pkg" "$target"
  done
done
echo "== all checks passed"
