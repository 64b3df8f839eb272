#!/bin/busybox sh
# /init of the guest that scripts/vmtest.sh boots: a busybox initramfs
# on Debian's 6.1 kernel with cgroup_no_v1=all. It mounts what the
# sandboxes need, loads the modules, mounts the job's ext4 disk (the
# built binaries; data directories and TMPDIR: idmapped mounts need it,
# tmpfs on 6.1 has none), delegates a cgroup v2 subtree to the test user
# (uid 1000) as systemd does, runs the test binaries the disk lists and
# powers off. The host reads the serial
# console: VMTEST-GUEST-UP when this script starts (the watchdog's sign
# that the boot did not hang), VMTEST-RESULT rc=N at the end.
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /tmp /mnt/disk
/bin/busybox --install -s
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# pivot_root(2) refuses to move the initramfs (rootfs) away, as every
# sandbox's root does: the first stage copies the initramfs to a tmpfs
# and makes that the root, as an installed system's would be.
if [ "$1" != stage2 ]; then
  echo VMTEST-GUEST-UP
  mkdir -p /newroot
  mount -t tmpfs -o mode=0755 tmpfs /newroot || exec echo "VMTEST-RESULT rc=1 (mounting the new root)"
  for e in /*; do
    [ "$e" = /newroot ] || cp -a "$e" /newroot/ || exec echo "VMTEST-RESULT rc=1 (copying $e)"
  done
  exec switch_root /newroot /init stage2
fi
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "vmtest guest: /init running at $(cut -d' ' -f1 /proc/uptime) s of uptime"

finish() {
  echo "VMTEST-RESULT rc=$1"
  sync
  poweroff -f
  sleep 60
}
fail() {
  echo "vmtest guest: $*"
  finish 1
}

mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts || fail "mounting /dev/pts"
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || fail "mounting /dev/shm"
mount -t tmpfs -o mode=1777 tmpfs /tmp || fail "mounting /tmp"
for m in $(cat /etc/vmtest/modules); do
  insmod "/lib/modules/$m.ko" || fail "insmod $m"
done
# devtmpfs makes it 0600; distributions' udev rules make it 0666.
chmod 0666 /dev/net/tun || fail "no /dev/net/tun"
mount -t cgroup2 cgroup2 /sys/fs/cgroup || fail "mounting cgroup2"
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
ip link set lo up || fail "lo up"
hostname vmtest

# The ext4 disk (virtio-blk over virtio-mmio: it appears once the
# modules are in).
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mount -t ext4 /dev/vda /mnt/disk || fail "mounting the ext4 disk /dev/vda"

# Delegation of /sys/fs/cgroup/deleg to the test user, as systemd's
# Delegate=yes: the directory and its cgroup.procs, cgroup.threads and
# cgroup.subtree_control are the user's; the user's processes live in
# its leaf, deleg/tester.
cg=/sys/fs/cgroup
echo "+cpu +memory +pids" >$cg/cgroup.subtree_control || fail "enabling controllers at the root"
mkdir $cg/deleg $cg/deleg/tester || fail "making the delegated subtree"
echo "+cpu +memory +pids" >$cg/deleg/cgroup.subtree_control || fail "enabling controllers in the delegated subtree"
chown 1000:1000 $cg/deleg $cg/deleg/cgroup.procs $cg/deleg/cgroup.threads $cg/deleg/cgroup.subtree_control || fail "chown deleg"
chown -R 1000:1000 $cg/deleg/tester || fail "chown deleg/tester"
# And one that is not delegated: root's, with a leaf the test starts the
# user in.
mkdir $cg/nodeleg $cg/nodeleg/tester || fail "making the undelegated subtree"
echo "+cpu +memory +pids" >$cg/nodeleg/cgroup.subtree_control || fail "enabling controllers in the undelegated subtree"

echo "vmtest guest: $(uname -r), $(nproc) CPUs, cgroup controllers: $(cat $cg/cgroup.controllers), LSMs: $(cat /sys/kernel/security/lsm 2>/dev/null || echo '?')"
# The disk's vmtest/tests: one test binary and its -test.run pattern per
# line, each run as root in /; the first failure is the result.
d=/mnt/disk/vmtest
rc=0
while read -r bin pattern; do
  echo "== vmtest guest: $bin -test.run '$pattern'"
  (cd / && AGENTKERNEL_VM_GUEST=1 AGENTKERNEL_VM_BIN=$d/ak/agentkernel AGENTKERNEL_TEST_STRICT=1 \
    TMPDIR=/mnt/disk/tmp HOME=/root \
    "$d/$bin" -test.v -test.count=1 -test.timeout "$(cat $d/timeout)" -test.run "$pattern" </dev/null)
  r=$?
  [ $rc = 0 ] && rc=$r
done <$d/tests
finish $rc
