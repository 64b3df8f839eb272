package attack

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/contract"
)

// probeDirs lists the probes: every directory under probes/ but
// internal/.
func probeDirs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("probes")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "internal" {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestProbeTable keeps probeTable and probes/ in step: every probe has
// a row saying what its positive control proves, and every row a probe.
func TestProbeTable(t *testing.T) {
	dirs := probeDirs(t)
	seen := map[string]bool{}
	for _, d := range dirs {
		seen[d] = true
		if probeTable[d].Control == "" {
			t.Errorf("probe %s has no row in probeTable (expect_test.go) saying what its positive control proves", d)
		}
	}
	for name := range probeTable {
		if !seen[name] {
			t.Errorf("probeTable has a row for %s, which is not in probes/", name)
		}
	}
	for _, e := range exceptions {
		if !seen[e.Probe] {
			t.Errorf("exception for %s, which is not in probes/", e.Probe)
		}
	}
	for _, d := range contract.Differences() {
		if d.Suite == contract.SuiteAttack && !strings.HasPrefix(d.Check, "check:") && !seen[d.Check] {
			t.Errorf("internal/contract: a %s row for %s, which is not in probes/", d.Backend, d.Check)
		}
	}
}

// TestProbesHaveControls checks every probe's source: its main is
// exactly probe.Run(name, attack, control), so that the battery's
// ATTACK_CONTROL=1 can never run an attack on the host, and it has a
// control function with a comment saying what it checks.
func TestProbesHaveControls(t *testing.T) {
	for _, d := range probeDirs(t) {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join("probes", d, "*.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("%s: no Go files (%v)", d, err)
			continue
		}
		var mains, controls int
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			for _, decl := range af.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Recv != nil {
					continue
				}
				switch fn.Name.Name {
				case "main":
					mains++
					if !isProbeRun(fn) {
						t.Errorf("%s: main must be exactly `probe.Run(name, attack, control)`", f)
					}
				case "control":
					controls++
					if fn.Doc == nil || !strings.HasPrefix(fn.Doc.Text(), "control") {
						t.Errorf("%s: control needs a comment saying what it checks on the host (\"// control: ...\")", f)
					}
				}
			}
		}
		if mains != 1 {
			t.Errorf("%s: %d main functions", d, mains)
		}
		if controls == 0 {
			t.Errorf("%s: no control function", d)
		}
	}
}

func isProbeRun(fn *ast.FuncDecl) bool {
	if fn.Body == nil || len(fn.Body.List) != 1 {
		return false
	}
	es, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok || len(call.Args) != 3 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Run" {
		return false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "probe" {
		return false
	}
	for i, want := range []string{"name", "attack", "control"} {
		if id, ok := call.Args[i].(*ast.Ident); !ok || id.Name != want {
			return false
		}
	}
	return true
}

// TestNADeclarations: every declared not-applicable case names a kind of
// user the battery has, says why, and says what the control must show.
func TestNADeclarations(t *testing.T) {
	for probe, info := range probeTable {
		for kind, decls := range info.NA {
			if kind != kindRoot && kind != kindRootless {
				t.Errorf("%s: n-a declared for %q, which is no kind of user the battery has", probe, kind)
			}
			for _, d := range decls {
				if d.Why == "" || len(d.Shows) == 0 {
					t.Errorf("%s/%s: an n-a declaration needs its reason and the texts its control shows: %+v", probe, kind, d)
				}
				for _, s := range d.Shows {
					if strings.TrimSpace(s) == "" {
						t.Errorf("%s/%s: an empty text would match any detail: %+v", probe, kind, d)
					}
				}
			}
		}
	}
}

// TestNotApplicableBounded: a control's "n-a" passes only where its probe
// declares one for that kind of user, and only for a declared reason.
func TestNotApplicableBounded(t *testing.T) {
	for _, c := range []struct {
		probe, kind, detail string
		ok                  bool
	}{
		// Declared, for the declared reason.
		{"dev_kvm", kindRoot, "this machine has no /dev/kvm: open /dev/kvm: no such file or directory", true},
		{"swapon", kindRootless, "swap needs CAP_SYS_ADMIN in the initial user namespace, which this user lacks with or without a sandbox: swapon: operation not permitted; swapoff: operation not permitted", true},
		// Declared for rootless only.
		{"swapon", kindRoot, "swap needs CAP_SYS_ADMIN in the initial user namespace, which this user lacks with or without a sandbox: swapon: operation not permitted; swapoff: operation not permitted", false},
		// Declared, but for another reason.
		{"swapon", kindRootless, "swap needs CAP_SYS_ADMIN in the initial user namespace, which this user lacks with or without a sandbox: swapon: invalid argument; swapoff: operation not permitted", false},
		{"dev_kvm", kindRoot, "this user may not open /dev/kvm, with or without a sandbox: permission denied", false},
		// Never declared.
		{"read_host_canary", kindRoot, "the canary is gone", false},
		{"read_host_canary", kindRootless, "the canary is gone", false},
		{"signal_host", kindRootless, "no victim", false},
	} {
		p := naProblem(c.probe, c.kind, c.detail)
		if (p == "") != c.ok {
			t.Errorf("%s as %s, n-a %q: problem %q, want allowed=%v", c.probe, c.kind, c.detail, p, c.ok)
		}
	}
}
