package native

import (
	"context"
	"io"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// BenchmarkRunTrue is one sandboxed /bin/true with every fence on,
// measured in-process (without the CLI's own start-up).
func BenchmarkRunTrue(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	spec := newSpec("/bin/true")
	for i := 0; i < b.N; i++ {
		res, err := bk.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

func BenchmarkRunTrueBare(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	spec := newSpec("/bin/true")
	spec.Security.Landlock = false
	spec.Security.Seccomp = "unconfined"
	for i := 0; i < b.N; i++ {
		res, err := bk.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

func BenchmarkRunTrueNoLandlock(b *testing.B) {
	bk := New(Options{DataDir: b.TempDir()})
	spec := newSpec("/bin/true")
	spec.Security.Landlock = false
	for i := 0; i < b.N; i++ {
		res, err := bk.Run(context.Background(), spec, sandbox.Stdio{Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res)
		}
	}
}

// BenchmarkCompileSeccomp is the per-run cost of building docker's
// default filter in the exec stage.
func BenchmarkCompileSeccomp(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := compileSeccomp("default", dockerCaps, false); err != nil {
			b.Fatal(err)
		}
	}
}
