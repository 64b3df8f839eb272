// Package attack is agentkernel's attack battery: small static programs
// (probes/<name>) that each try one escape or abuse from inside a
// sandbox, and a test that runs every probe in every profile, as root and
// rootless, through the native backend and checks the outcome against an
// expectation table (expect_test.go). RESULTS.md is generated from a run:
//
//	go test ./test/attack/ -run TestAttack -update
//
// See SECURITY.md at the repository root for the threat model the
// battery backs.
package attack
