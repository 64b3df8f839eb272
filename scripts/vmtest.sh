#!/usr/bin/env bash
# The cgroup v2 guest job (.ci/run calls it after the test suite): boots
# Debian's 6.1 cloud kernel under QEMU (TCG: no KVM here) with
# cgroup_no_v1=all, from a busybox initramfs, with the two static
# binaries and the test binaries on an ext4 disk image, and runs test/vm's
# checks there as root and as a user with a delegated cgroup v2 subtree,
# and the native backend's cgroup tests as root. How it works, and what
# it checks: docs/vmtest.md.
#
# Needs qemu-system-x86, busybox-static, e2fsprogs (mkfs.ext4), apt-get
# (the kernel package) and Go. Environment:
#   AGENTKERNEL_VMTEST_CACHE     the kernel and the initramfs's fixed part
#                                (default ~/.cache/agentkernel-vmtest)
#   AGENTKERNEL_VMTEST_RUN       -test.run pattern for test/vm (default: all)
#   AGENTKERNEL_VMTEST_NATIVE_RUN  -test.run pattern for the native
#                                backend's tests (default: $native_tests)
#   AGENTKERNEL_VMTEST_ATTEMPTS  boots tried when one hangs early (3)
#   AGENTKERNEL_VMTEST_BOOT_WAIT seconds a boot may take to start /init (60)
#   AGENTKERNEL_VMTEST_TIMEOUT   seconds for the whole guest run (900)
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=0
export PATH=$PATH:/usr/local/go/bin
job_start=$(date +%s)

cache=${AGENTKERNEL_VMTEST_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/agentkernel-vmtest}
attempts=${AGENTKERNEL_VMTEST_ATTEMPTS:-3}
guest_timeout=${AGENTKERNEL_VMTEST_TIMEOUT:-900}
# A guest that has not started its /init after this many seconds hung
# early in the boot: it is killed and booted again. A normal boot takes
# 3 to 8 s, the initramfs's unpacking included.
boot_wait=${AGENTKERNEL_VMTEST_BOOT_WAIT:-60}
# The early hangs come from the kernel's timer calibration: under TCG on
# a busy host, calibrating the TSC and the delay loop against the
# emulated PIT fails or never ends (on a machine with a load of 15, every
# boot hung). A preset TSC frequency and loops-per-jiffy skip both; the
# guest then keeps time with jiffies (its vCPUs' TSCs are not in sync).
clock_args="tsc_early_khz=2000000 lpj=8000000"
kernel_meta=linux-image-cloud-amd64
modules=(virtio_ring virtio virtio_mmio virtio_blk overlay tun)
# The native backend's own tests of cgroups, limits and Landlock, run as
# root in the guest (test/vm covers the binaries, root and rootless;
# the native TestRootless needs useradd, which the guest lacks).
native_tests='^(TestMemoryLimit|TestOOMKills|TestPidsLimit|TestCPULimitAndCgroupRemoved|TestLandlock|TestAnticipatedCgroup|TestCommandCgroupNamespace|TestKeepAndGC|TestGCOnlyItsDataDir|TestCgroupOwner)$'

die() {
  echo "vmtest: $*" >&2
  exit 1
}
for tool in qemu-system-x86_64 mkfs.ext4 dpkg-deb go; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install -y qemu-system-x86 e2fsprogs dpkg; Go in PATH)"
done
[ -x /bin/busybox ] || die "/bin/busybox not found (apt-get install -y busybox-static)"
mkdir -p "$cache"
work=$(mktemp -d "${TMPDIR:-/tmp}/agentkernel-vmtest.XXXXXX")
qemu_pid=
cleanup() {
  [ -n "$qemu_pid" ] && kill -9 "$qemu_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# --- the kernel: the package linux-image-cloud-amd64 depends on, unpacked
# (never installed) into the cache, keyed by its name and version.
kpkg=$(apt-cache depends "$kernel_meta" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}' || true)
kver=
[ -n "$kpkg" ] && kver=$(apt-cache show --no-all-versions "$kpkg" 2>/dev/null | awk '/^Version:/ {print $2; exit}' || true)
if [ -n "$kpkg" ] && [ -n "$kver" ]; then
  kdir=$cache/kernel-$kpkg-$kver
  if [ ! -f "$kdir/.done" ]; then
    echo "== vmtest: fetching $kpkg $kver"
    rm -rf "$kdir" && mkdir -p "$kdir/deb"
    chmod 777 "$kdir/deb" # apt-get download drops to _apt where it can
    (cd "$kdir/deb" && apt-get download -q "$kpkg=$kver" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    deb=$(ls "$kdir"/deb/*.deb 2>/dev/null | head -n1 || true)
    [ -n "$deb" ] || die "apt-get download $kpkg=$kver failed (apt-get update first?)"
    dpkg-deb -x "$deb" "$kdir/x"
    rm -rf "$kdir/deb"
    touch "$kdir/.done"
  fi
else
  # No apt lists: the newest kernel already in the cache.
  kdir=$(ls -d "$cache"/kernel-*/ 2>/dev/null | sort -V | tail -n1 || true)
  kdir=${kdir%/}
  [ -n "$kdir" ] && [ -f "$kdir/.done" ] || die "cannot resolve $kernel_meta (run apt-get update) and no kernel is cached in $cache"
fi
vmlinuz=$(ls "$kdir"/x/boot/vmlinuz-* | head -n1)
krel=${vmlinuz##*/vmlinuz-}
case $krel in 6.1.*) ;; *) die "$kpkg is kernel $krel, not 6.1" ;; esac
kmod=$kdir/x/lib/modules/$krel

# --- the initramfs: busybox, /init, the modules and the users, cached by
# its inputs.
base_key=$( (sha256sum /bin/busybox scripts/vmtest/init.sh; echo "$krel ${modules[*]}") | sha256sum | cut -c1-16)
base=$cache/base-$base_key.cpio
if [ ! -f "$base" ]; then
  echo "== vmtest: building the initramfs"
  rm -f "$cache"/base-*.cpio
  root=$work/base
  mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc/vmtest,lib/modules,proc,sys,dev,tmp,root,opt,mnt/disk,home/tester}
  cp /bin/busybox "$root/bin/busybox"
  install -m 0755 scripts/vmtest/init.sh "$root/init"
  # Each module with the ones it names in its .modinfo depends=, in order.
  loaded=()
  add_module() {
    local m=$1 f dep
    for dep in "${loaded[@]}"; do [ "$dep" = "$m" ] && return 0; done
    f=$(find "$kmod/kernel" -name "$m.ko" | head -n1)
    [ -n "$f" ] || die "module $m not in $kpkg"
    for dep in $(tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | tr ',' ' '); do
      add_module "$dep"
    done
    cp "$f" "$root/lib/modules/$m.ko"
    loaded+=("$m")
  }
  for m in "${modules[@]}"; do add_module "$m"; done
  printf '%s\n' "${loaded[@]}" >"$root/etc/vmtest/modules"
  printf 'root:x:0:0:root:/root:/bin/sh\ntester:x:1000:1000:tester:/home/tester:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\ntester:x:1000:\n' >"$root/etc/group"
  printf '127.0.0.1\tlocalhost vmtest\n::1\tlocalhost\n' >"$root/etc/hosts"
  chown 1000:1000 "$root/home/tester"
  (cd "$root" && find . | /bin/busybox cpio -o -H newc >"$base.tmp" 2>/dev/null)
  mv "$base.tmp" "$base"
  rm -rf "$root"
fi

echo "== vmtest: building agentkernel and the tests"
# The built part goes on the job's ext4 disk, not in the initramfs: the
# guest then copies only the small fixed part to its tmpfs root.
root=$work/built
mkdir -p "$root/vmtest/ak" "$root/tmp"
chmod 1777 "$root/tmp"
go vet -tags vmguest ./test/vm
go build -o "$root/vmtest/ak/" ./cmd/agentkernel ./cmd/agentkernel-full
go test -c -tags vmguest -o "$root/vmtest/vm.test" ./test/vm
go test -c -o "$root/vmtest/native.test" ./internal/backend/native
# Each line: a test binary and its -test.run pattern.
{
  echo "vm.test ${AGENTKERNEL_VMTEST_RUN:-.}"
  echo "native.test ${AGENTKERNEL_VMTEST_NATIVE_RUN:-$native_tests}"
} >"$root/vmtest/tests"
echo "$((guest_timeout - 60))s" >"$root/vmtest/timeout"

# --- the disk: a fresh sparse ext4 image with the built part, for the
# data directories and TMPDIR too.
truncate -s 8G "$work/disk.img"
mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 -d "$root" "$work/disk.img"

# --- boot, with the watchdog: up to $attempts boots while the guest
# hangs before its /init starts; then the guest's run to its end.
log=
boot() {
  log=$work/console.$1.log
  : >"$log"
  qemu-system-x86_64 -M microvm -cpu max -smp 2 -m 2048 \
    -nodefaults -no-user-config -display none -no-reboot \
    -serial "file:$log" \
    -kernel "$vmlinuz" -initrd "$base" \
    -append "console=ttyS0 cgroup_no_v1=all panic=-1 quiet $clock_args" \
    -drive "id=disk,file=$work/disk.img,format=raw,if=none,cache=unsafe" \
    -device virtio-blk-device,drive=disk &
  qemu_pid=$!
}
up=
for attempt in $(seq 1 "$attempts"); do
  boot_start=$(date +%s.%N)
  boot "$attempt"
  for _ in $(seq 1 $((boot_wait * 10))); do
    if grep -q '^VMTEST-GUEST-UP' "$log"; then
      up=$(date +%s.%N)
      break
    fi
    kill -0 "$qemu_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$up" ] && break
  echo "== vmtest: boot $attempt hung before /init started; console:"
  tail -n 20 "$log" || true
  kill -9 "$qemu_pid" 2>/dev/null || true
  wait "$qemu_pid" 2>/dev/null || true
  qemu_pid=
done
[ -n "$up" ] || die "the guest did not start in $attempts boots"
echo "== vmtest: guest up in $(awk "BEGIN{printf \"%.1f\", $up - $boot_start}") s (boot $attempt); console:"
tail -n +1 -f --pid="$qemu_pid" "$log" &
tail_pid=$!
deadline=$(($(date +%s) + guest_timeout))
while kill -0 "$qemu_pid" 2>/dev/null; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    kill -9 "$qemu_pid" 2>/dev/null || true
    wait "$tail_pid" 2>/dev/null || true
    die "the guest did not finish in ${guest_timeout}s"
  fi
  sleep 1
done
wait "$qemu_pid" 2>/dev/null || true
qemu_pid=
wait "$tail_pid" 2>/dev/null || true
guest_end=$(date +%s.%N)
# The serial console ends its lines with \r\n.
tr -d '\r' <"$log" >"$log.txt"
log=$log.txt
result=$(sed -n 's/^VMTEST-RESULT rc=\([0-9]*\).*/\1/p' "$log" | tail -n1)
echo "== vmtest: guest ran $(awk "BEGIN{printf \"%.1f\", $guest_end - $up}") s; job $(($(date +%s) - job_start)) s"
[ -n "$result" ] || die "the guest ended without a result (crash or panic: see the console above)"
[ "$result" = 0 ] || die "test/vm failed in the guest (exit $result)"
grep -q -- '^--- FAIL' "$log" && die "a test failed in the guest"
[ "$(grep -c '^PASS$' "$log")" -ge 2 ] || die "the guest's test binaries did not each report PASS"
echo "== vmtest: all checks passed on cgroup v2 (kernel $krel)"
