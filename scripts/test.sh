#!/usr/bin/env bash
# The whole test suite: formatting, vet, the macOS build, every Go test
# (real namespaces and mounts: run as root for full coverage) and a short
# run of every fuzz target. Installs the Debian packages the tests use when
# it runs as root and they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
FUZZTIME=${FUZZTIME:-10s}

packages=(busybox-static uidmap)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi

if command -v as >/dev/null && command -v ld >/dev/null; then
  echo "== exec stub matches its assembly source"
  stubdir=$(mktemp -d)
  as --64 -o "$stubdir/s.o" internal/backend/native/stub/execstub_amd64.S
  ld -static -n -s --build-id=none -e _start -o "$stubdir/s.bin" "$stubdir/s.o"
  cmp "$stubdir/s.bin" internal/backend/native/stub/execstub_amd64.bin || { echo "stub/execstub_amd64.bin is stale: go generate ./internal/backend/native"; exit 1; }
  rm -rf "$stubdir"
fi

echo "== go vet"
go vet ./...

echo "== GOOS=darwin go build"
GOOS=darwin go build ./...

echo "== go build"
go build -o bin/agentkernel ./cmd/agentkernel

echo "== go test"
go test -count=1 -timeout 15m ./...

echo "== fuzz ($FUZZTIME per target)"
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "-- $pkg $target"
    go test -run "^$" -fuzz "^${target}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s "$pkg"
  done
done
echo "== all checks passed"
