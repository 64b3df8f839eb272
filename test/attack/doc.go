// Package attack is agentkernel's attack battery: small static programs
// (probes/<name>) that each try one escape or abuse from inside a
// sandbox, and a test that runs every probe in every profile, as root
// (directly and through prepared sandboxes, "root-pool") and rootless (as
// a user the test creates), through the native backend and checks the
// outcome against an expectation table (expect_test.go). RESULTS.md is
// generated from a run:
//
//	test/attack/results.sh    (go test ./test/attack/ -run TestAttack -update)
//
// # Positive controls
//
// A probe that reports "blocked" proves nothing if its target is not
// there (no /dev/kvm, a system call this kernel lacks) or if the probe
// is broken. So every probe also has a positive control: the same
// reachability check made on the host, outside any sandbox, as the same
// kind of user the battery's sandboxes run as (root for the root
// batteries, the unprivileged test user for the rootless one), without
// harming the host: invalid arguments that fail with EINVAL past the
// permission check and with EPERM before it, throwaway namespaces,
// opening files for writing without writing, scaled-down versions of the
// resource exhaustions. Before the probes, the battery runs every
// control once per kind of user (concurrently; a few seconds in all) and
// judges each sandbox outcome with it:
//
//   - control "reachable": the usual expectation holds ("blocked", or a
//     documented exception);
//   - control "n-a": the target does not exist for this kind of user on
//     this machine; the probe's "blocked" is shown as "n-a" and not
//     counted as a defence. Only where the probe's row declares it (NA in
//     probeTable: per kind of user, root or rootless, the reason and the
//     texts the control's detail must show, its errno or setting):
//     anywhere else, or for another reason, "n-a" fails the row. An
//     unprivileged control reports "n-a" only for a permission check's
//     refusal (EPERM, EACCES: probe.Refused), and "the kernel lacks it"
//     only for ENOSYS outside any seccomp filter (probe.KernelLacks):
//     inside a sandbox ENOSYS is the filter's answer, a "blocked";
//   - control "unreachable" or no report: the probe is broken, and the
//     test fails.
//
// What each control proves is listed, per probe, in probeTable in
// expect_test.go, next to the expectations, and in RESULTS.md.
//
// # Adding a probe
//
// A probe is its directory and its row; nothing in the runner changes:
//
//  1. probes/<name>/main.go: a static program whose package comment says
//     what it tries, with
//
//     func main() { probe.Run(name, attack, control) }
//
//     attack runs inside the sandbox and reports through probe.Report
//     "blocked", "allowed", "n-a" (no target) or "error". control runs
//     on the host (the battery sets ATTACK_CONTROL=1) and reports
//     probe.Reachable, probe.NotApplicable (with the reason: the target
//     is absent here, or the kernel refuses it to this kind of user
//     whatever the sandbox does) or probe.Unreachable. The helpers in
//     probes/internal/probe make most controls a few lines:
//     AttackReaches runs the attack itself on the host when that is
//     harmless, Isolated runs a step in throwaway namespaces (in a user
//     namespace of its own when unprivileged), PastGate tells a
//     permission check's EPERM from an argument check's EINVAL.
//     control must never change the host: no writes to shared state, no
//     signals to processes it did not start, no packets off the machine.
//
//  2. its row in probeTable (expect_test.go): what a "reachable" control
//     proves, Heavy when it loads the machine (run one at a time), and NA
//     for each kind of user whose control may find no target, with why.
//     An exception there too when a profile lets it through by design.
//
// The probes get their targets in ATTACK_* variables (runner_linux_test.go,
// probeEnv); a probe that needs another one adds it there. TestProbeTable
// and TestProbesHaveControls (no root needed) fail when a probe lacks its
// row, its control, or the one-line main.
//
// # Other backends
//
// TestAttackBackends runs the root battery again through gvisor, docker
// and podman (backends_linux_test.go; ATTACK_BACKENDS=gvisor,docker for
// some): the same probes (built once), fixtures, positive controls and
// host checks. A backend's expectations are native's
// table with that backend's rows from internal/contract, each with its
// reason; a probe or host check that ends other than listed fails, one
// that now passes too (its row must go). doctor and
// docs/backend-differences.md show the same rows. A backend the machine
// lacks fails under the suite and is skipped elsewhere.
//
// See SECURITY.md at the repository root for the threat model the
// battery backs.
package attack
