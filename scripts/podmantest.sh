#!/usr/bin/env bash
# The container job (.ci/run calls it after scripts/vmtest.sh): agentkernel
# run inside podman containers, each started with a different set of
# options, from a root filesystem this script builds (busybox-static,
# the two static binaries, test/vm's test binary; no image is pulled).
# In each, test/vm's TestContainer runs doctor --json as root and as an
# unprivileged user and then real runs, and holds every probe's verdict
# to what the runs do. What each configuration is and what a user needs
# inside a container: docs/containers.md.
#
# Needs podman, busybox-static and Go; run it as root. Environment:
#   AGENTKERNEL_PODMANTEST_CONFIGS  the configurations to run (default:
#                                   privileged minimal nomknod rocgroup
#                                   rootless default)
#   AGENTKERNEL_PODMANTEST_TIMEOUT  seconds per container (300)
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
export PATH=$PATH:/usr/local/go/bin
job_start=$(date +%s)
configs=${AGENTKERNEL_PODMANTEST_CONFIGS:-privileged minimal nomknod rocgroup rootless default}
timeout_s=${AGENTKERNEL_PODMANTEST_TIMEOUT:-300}

die() {
  echo "podmantest: $*" >&2
  exit 1
}
command -v podman >/dev/null || die "podman not found (apt-get install -y podman)"
command -v go >/dev/null || die "go not found"
[ -x /bin/busybox ] || die "/bin/busybox not found (apt-get install -y busybox-static)"
[ "$(id -u)" = 0 ] || die "run it as root"

work=$(mktemp -d "${TMPDIR:-/tmp}/agentkernel-podmantest.XXXXXX")
ctr=
cleanup() {
  [ -n "$ctr" ] && podman rm -f "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== podmantest: building agentkernel and the checks"
go vet -tags vmguest ./test/vm
root=$work/root
mkdir -p "$root"/{ak,bin,etc,tmp,root,home/tester,proc,sys,dev,run}
chmod 1777 "$root/tmp"
go build -o "$root/ak/" ./cmd/agentkernel ./cmd/agentkernel-full
go test -c -tags vmguest -o "$root/vm.test" ./test/vm
cp /bin/busybox "$root/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\ntester:x:1000:1000:tester:/home/tester:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\ntester:x:1000:\n' >"$root/etc/group"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost\n' >"$root/etc/hosts"
chown 1000:1000 "$root/home/tester"

# Each configuration's podman options. "minimal" is the least that gives
# root full isolation: CAP_SYS_ADMIN (the namespaces, mounts and
# idmapped mounts a root run makes), CAP_NET_ADMIN (lo up in the
# sandbox's network namespace), CAP_MKNOD (its /dev; podman's default
# set lacks it), /dev/net/tun (network egress), and
# the cgroup hierarchy, which podman mounts read-only, remounted
# read-write by the container's own entrypoint (remount below).
options() {
  case $1 in
    privileged) echo "--privileged" ;;
    minimal) echo "--cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add MKNOD --device /dev/net/tun" ;;
    nomknod) echo "--cap-add SYS_ADMIN --cap-add NET_ADMIN --device /dev/net/tun" ;;
    rocgroup) echo "--cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add MKNOD --device /dev/net/tun" ;;
    rootless) echo "--security-opt unmask=ALL --security-opt seccomp=unconfined" ;;
    default) echo "" ;;
    *) die "unknown configuration $1" ;;
  esac
}
# The entrypoint's remount: every cgroup hierarchy the container sees
# (v1: one per controller; v2: /sys/fs/cgroup itself).
remount='for m in $(awk '\''$3 == "cgroup2" || $3 == "cgroup" && $4 ~ /(^|,)(memory|pids|cpu)(,|$)/ {print $2}'\'' /proc/self/mounts); do mount -o remount,bind,rw "$m" || exit 1; done'

rc=0
for cfg in $configs; do
  opts=$(options "$cfg")
  pre=
  [ "$cfg" = minimal ] && pre="$remount; "
  echo "== podmantest: $cfg (podman run $opts)"
  start=$(date +%s)
  ctr=agentkernel-podmantest-$$-$cfg
  # --network none: the checks' registry is on the container's loopback.
  # The ulimits: podman as root asks for more than this host's hard
  # limits otherwise (MACHINE-NOTES).
  set +e
  # shellcheck disable=SC2086
  timeout --kill-after=10 "$timeout_s" podman run --rm --name "$ctr" --network none \
    --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 \
    -e AGENTKERNEL_VM_GUEST=container -e AGENTKERNEL_CONTAINER="$cfg" \
    -e AGENTKERNEL_VM_BIN=/ak/agentkernel -e AGENTKERNEL_TEST_STRICT=1 \
    -e PATH=/bin -e HOME=/root -e TMPDIR=/tmp \
    $opts --rootfs "$root" \
    /bin/sh -c "${pre}exec /vm.test -test.v -test.count=1 -test.timeout ${timeout_s}s -test.run '^TestContainer\$'" \
    2>&1 | tee "$work/$cfg.log"
  r=${PIPESTATUS[0]}
  set -e
  ctr=
  echo "== podmantest: $cfg: exit $r in $(($(date +%s) - start)) s"
  if [ "$r" != 0 ] || ! grep -q '^--- PASS: TestContainer' "$work/$cfg.log"; then
    echo "podmantest: $cfg failed" >&2
    rc=1
  fi
done
echo "== podmantest: job $(($(date +%s) - job_start)) s"
[ "$rc" = 0 ] || die "a container configuration failed (see above)"
echo "== podmantest: doctor's verdicts held in every configuration ($configs)"
