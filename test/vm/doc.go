// Package vm holds the checks that run inside the QEMU guest of
// scripts/vmtest.sh: a Debian 6.1 kernel booted with cgroup_no_v1=all
// (pure cgroup v2), the built binaries run as root and as a test user
// whose cgroup v2 subtree was delegated to it (chowned, as systemd does).
// They cover what the development machines' hybrid cgroups and newer
// kernel cannot: v2 memory, pids and CPU limits, root and rootless;
// seccomp and Landlock (ABI 2) on an older kernel; a persistent sandbox.
//
// The tests build only with the vmguest tag and run only in that guest
// (the guest's /init sets AGENTKERNEL_VM_GUEST=1): the suite's
// go test ./... sees no test files here.
package vm
