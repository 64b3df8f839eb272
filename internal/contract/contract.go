// Package contract is what every backend is held to, as data: the
// checks a backend is known not to pass the way the native backend
// does, each with the one-line reason. The attack battery (test/attack),
// the file-visibility, cp and HTTP API contract tests (test/e2e) run the
// same assertions against every backend the machine has and take their
// expectations for a backend from here; `agentkernel doctor` shows the
// same list per backend, and docs/backend-differences.md is checked
// against it. A backend is never silently weaker: what it does not do
// is listed here, and a test fails when it behaves other than listed
// (better included, so that a fixed difference leaves the list).
package contract

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// The backends the contract is run against.
const (
	Native = "native"
	GVisor = "gvisor"
	Docker = "docker"
	Podman = "podman"
)

// Kubernetes is `serve` with its sandboxes as pods of a cluster, held to
// the API and Node SDK suites (test/e2e's TestAPIContractKubernetes runs
// them against a real API server and node).
const Kubernetes = "kubernetes"

// Nomad is the nomad backend as `serve` runs it: its sandboxes are
// Nomad jobs, run by the nodes' agentkernel.
const Nomad = "nomad"

// Backends are the backends every suite runs against, native first.
func Backends() []string { return []string{Native, GVisor, Docker, Podman} }

// Orchestrated are the backends whose sandboxes run on a cluster's
// nodes: the HTTP API suite runs against them, each in a test of its
// own that starts the cluster (test/e2e), the other suites do not.
func Orchestrated() []string { return []string{Kubernetes, Nomad} }

// All are Backends, then Orchestrated: every backend with rows here.
func All() []string { return append(Backends(), Orchestrated()...) }

// The suites that take their per-backend expectations from here.
const (
	// SuiteAttack is the attack battery: Check is a probe's name (its
	// Want a probe result: "allowed", "n-a") or "check:" and a host
	// check's name (Want "fails").
	SuiteAttack = "attack"
	// SuiteFiles is the file-visibility and cp tests: Check is a case's
	// name, Want "differs" (the assertion named in Why does not hold) or
	// "unsupported" (the backend refuses the operation).
	SuiteFiles = "files"
	// SuiteAPI is the HTTP API contract test with the backend as the
	// server's default: Check is a step's name, Want as SuiteFiles.
	SuiteAPI = "api"
	// SuiteNodeSDK is the official Node SDK's script against serve with
	// the backend as the server's default: Check is an SDK call's case,
	// Want as SuiteFiles.
	SuiteNodeSDK = "nodesdk"
)

// Wants that are not a probe's result.
const (
	Differs     = "differs"
	Unsupported = "unsupported"
	Fails       = "fails"
)

// Difference is one check a backend does not pass as native does.
type Difference struct {
	Backend string `json:"backend"`
	Suite   string `json:"suite"`
	Check   string `json:"check"`
	// Profiles the difference holds in; nil: every profile.
	Profiles []string `json:"profiles,omitempty"`
	// Want is what the check comes to on this backend instead.
	Want string `json:"want"`
	// Why is the one-line reason.
	Why string `json:"why"`
}

// Differences are every known difference, by backend, suite and check.
func Differences() []Difference {
	d := differences()
	sort.SliceStable(d, func(i, j int) bool {
		a, b := d[i], d[j]
		if a.Backend != b.Backend {
			return slices.Index(All(), a.Backend) < slices.Index(All(), b.Backend)
		}
		if a.Suite != b.Suite {
			return a.Suite < b.Suite
		}
		return a.Check < b.Check
	})
	return d
}

// For are backend's differences.
func For(backend string) []Difference {
	var out []Difference
	for _, d := range Differences() {
		if d.Backend == backend {
			out = append(out, d)
		}
	}
	return out
}

// Lookup finds the difference for backend's check of suite in profile
// ("" matches a difference for every profile only).
func Lookup(backend, suite, check, profile string) (Difference, bool) {
	for _, d := range differences() {
		if d.Backend != backend || d.Suite != suite || d.Check != check {
			continue
		}
		if d.Profiles != nil && !slices.Contains(d.Profiles, profile) {
			continue
		}
		return d, true
	}
	return Difference{}, false
}

// Markdown renders the differences as the table of
// docs/backend-differences.md, by backend.
func Markdown() string {
	var b strings.Builder
	for _, be := range All() {
		ds := For(be)
		fmt.Fprintf(&b, "### %s\n\n", be)
		if len(ds) == 0 {
			b.WriteString("Passes every check as native does (native is the reference).\n\n")
			continue
		}
		b.WriteString("| suite | check | profiles | result | why |\n|---|---|---|---|---|\n")
		for _, d := range ds {
			prof := "all"
			if d.Profiles != nil {
				prof = strings.Join(d.Profiles, ", ")
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", d.Suite, strings.ReplaceAll(d.Check, "|", "\\|"), prof, d.Want, strings.ReplaceAll(d.Why, "|", "\\|"))
		}
		b.WriteString("\n")
	}
	return b.String()
}
