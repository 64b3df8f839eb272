#!/usr/bin/env bash
# Regenerates test/attack/RESULTS.md from a fresh run of the attack battery
# (go test -run TestAttack -update). Run it as root: root runs both the root
# and the rootless variant (as a user the test creates); a non-root run can
# only fill the rootless columns. The table is written even when some probe
# fails its expectation; the script then exits non-zero like the test.
set -uo pipefail
cd "$(dirname "$0")"
export CGO_ENABLED=0
if [ "$(id -u)" != 0 ]; then
  echo "results.sh: not root: only the rootless columns will be filled" >&2
fi
marker=$(mktemp)
trap 'rm -f "$marker"' EXIT
go test -count=1 -timeout 15m -run '^TestAttack$' . -update "$@"
status=$?
if [ RESULTS.md -nt "$marker" ]; then
  echo "results.sh: wrote $(pwd)/RESULTS.md"
else
  echo "results.sh: RESULTS.md was not rewritten (the test did not get that far)" >&2
  [ $status = 0 ] && status=1
fi
exit $status
