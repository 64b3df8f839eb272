package runcli

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These tests run cp against a real agent server on a real socket in a
// sandbox's directory (serveSandbox): what it refuses, and docker's "-"
// (a tar stream on standard input or output).

// cpRun runs 'cp args...' against the sandboxes under dd with stdin.
func cpRun(dd string, stdin io.Reader, args ...string) (stdout, stderr *bytes.Buffer, err error) {
	a, out, errb := leanApp()
	a.Stdin = stdin
	err = a.ExecuteSandboxCommand(append([]string{"--data-dir", dd, "cp"}, args...))
	return out, errb, err
}

// wantCpError checks that err is cp's failure (exit status 125) and that
// its text holds every one of want.
func wantCpError(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitAgentkernel {
		t.Errorf("%s: %v, want exit status %d", what, err, ExitAgentkernel)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// entries lists what root holds, relative to it.
func entries(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if r, _ := filepath.Rel(root, p); r != "." {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCpMissingPaths: a source or destination that does not exist is a
// failure that names it, on either side, and nothing is copied.
func TestCpMissingPaths(t *testing.T) {
	dd, host := t.TempDir(), t.TempDir()
	_, root := serveSandbox(t, dd, "dev", nil, false)
	if err := os.Mkdir(filepath.Join(root, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(host)
	src := filepath.Join(host, "f.txt")
	if err := os.WriteFile(src, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"typo.txt", "dev:/root/"}, "typo.txt: no such file or directory"},
		{[]string{filepath.Join(host, "nodir", "typo.txt"), "dev:/root/"}, filepath.Join(host, "nodir", "typo.txt") + ": no such file or directory"},
		{[]string{"dev:/no/such/file", host}, "/no/such/file: no such file or directory in the sandbox"},
		{[]string{"dev:/root/nope", "out"}, "/root/nope: no such file or directory in the sandbox"},
		{[]string{src, "dev:/no/such/dir/"}, "/no/such/dir/: no such directory in the sandbox"},
		{[]string{src, "dev:/no/such/f.txt"}, "/no/such: no such directory in the sandbox"},
		{[]string{"dev:/root", filepath.Join(host, "no", "such", "out")}, filepath.Join(host, "no", "such") + ": no such file or directory"},
		{[]string{"dev:/root", filepath.Join(host, "nodir") + "/"}, filepath.Join(host, "nodir") + "/: no such directory"},
	} {
		_, _, err := cpRun(dd, nil, c.args...)
		wantCpError(t, strings.Join(c.args, " "), err, c.want)
	}
	if got := entries(t, root); len(got) != 1 || got[0] != "root" {
		t.Errorf("the sandbox holds %q after failed copies", got)
	}
	if got := entries(t, host); len(got) != 1 || got[0] != "f.txt" {
		t.Errorf("the host directory holds %q after failed copies", got)
	}

	// A symbolic link as the host source is named, not copied as nothing.
	if err := os.Symlink("f.txt", filepath.Join(host, "link")); err != nil {
		t.Fatal(err)
	}
	_, _, err := cpRun(dd, nil, "link", "dev:/root/")
	wantCpError(t, "cp link", err, "link: is a symbolic link")
	if got := entries(t, root); len(got) != 1 {
		t.Errorf("the sandbox holds %q after copying a link", got)
	}
}

// tarOf is a tar archive of hdrs, each regular file with body as its
// content.
func tarOf(t *testing.T, hdrs []*tar.Header, body string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCpTarStreams: as with docker cp, "-" is a tar stream: from
// standard input, extracted into an existing directory of the sandbox
// (and confined to it), and to standard output; never a host file
// called "-". Input that is not a tar archive, or an empty one, fails
// and says so.
func TestCpTarStreams(t *testing.T) {
	dd, host := t.TempDir(), t.TempDir()
	_, root := serveSandbox(t, dd, "dev", nil, false)
	if err := os.MkdirAll(filepath.Join(root, "tmp", "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp", "f"), []byte("from the sandbox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(host)

	// Out: a tar stream of the file, named by its base name.
	out, _, err := cpRun(dd, nil, "dev:/tmp/f", "-")
	if err != nil {
		t.Fatalf("cp dev:/tmp/f -: %v", err)
	}
	tr := tar.NewReader(out)
	h, err := tr.Next()
	if err != nil || h.Name != "f" {
		t.Fatalf("cp dev:/tmp/f -: %v %+v", err, h)
	}
	if b, _ := io.ReadAll(tr); string(b) != "from the sandbox\n" {
		t.Errorf("cp dev:/tmp/f -: content %q", b)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("cp dev:/tmp/f -: more after the file: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(host, "-")); err == nil {
		t.Error("cp dev:/tmp/f - wrote a host file called -")
	}
	// A missing source writes nothing to standard output.
	out, _, err = cpRun(dd, nil, "dev:/tmp/nope", "-")
	wantCpError(t, "cp dev:/tmp/nope -", err, "/tmp/nope: no such file or directory in the sandbox")
	if out.Len() != 0 {
		t.Errorf("cp dev:/tmp/nope - wrote %d bytes", out.Len())
	}

	// In: the archive's entries land in the directory.
	arc := tarOf(t, []*tar.Header{
		{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "d/a.txt", Typeflag: tar.TypeReg},
		{Name: "b.txt", Typeflag: tar.TypeReg},
	}, "hi\n")
	if _, _, err := cpRun(dd, bytes.NewReader(arc), "-", "dev:/tmp/in"); err != nil {
		t.Fatalf("cp - dev:/tmp/in: %v", err)
	}
	for _, p := range []string{"tmp/in/d/a.txt", "tmp/in/b.txt"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != "hi\n" {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	// The stream a 'cp NAME:PATH -' wrote goes back in.
	out, _, err = cpRun(dd, nil, "dev:/tmp/in", "-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "back"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cpRun(dd, out, "-", "dev:/back"); err != nil {
		t.Fatalf("cp - dev:/back: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "back", "in", "d", "a.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("round trip: %q %v", b, err)
	}

	before := entries(t, root)
	for _, c := range []struct {
		what  string
		stdin io.Reader
		dest  string
		want  string
	}{
		{"not a tar archive", strings.NewReader("hi\n"), "dev:/tmp/in", "standard input is not a tar archive"},
		{"an empty archive", bytes.NewReader(tarOf(t, nil, "")), "dev:/tmp/in", "empty tar archive"},
		{"empty input", strings.NewReader(""), "dev:/tmp/in", "empty tar archive"},
		{"a missing directory", bytes.NewReader(arc), "dev:/tmp/y", "/tmp/y: no such file or directory in the sandbox"},
		{"a file as the directory", bytes.NewReader(arc), "dev:/tmp/f", "/tmp/f: not a directory in the sandbox"},
		{"no standard input", nil, "dev:/tmp/in", "reads a tar archive from standard input"},
	} {
		_, _, err := cpRun(dd, c.stdin, "-", c.dest)
		wantCpError(t, c.what, err, c.want)
	}
	if after := entries(t, root); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("failed copies changed the sandbox:\n%q\n%q", before, after)
	}

	// A hostile archive stays inside the sandbox: names climbing out of
	// the directory, absolute names, and a link to / followed by a file
	// through it all land in the sandbox, never on the host beside it.
	outside := filepath.Dir(root)
	hostile := tarOf(t, []*tar.Header{
		{Name: "../../../../../../../../" + outside + "/escaped-up", Typeflag: tar.TypeReg},
		{Name: outside + "/escaped-abs", Typeflag: tar.TypeReg},
		{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "/"},
		{Name: "up" + outside + "/escaped-link", Typeflag: tar.TypeReg},
	}, "pwned\n")
	_, _, _ = cpRun(dd, bytes.NewReader(hostile), "-", "dev:/tmp/in")
	for _, n := range []string{"escaped-up", "escaped-abs", "escaped-link"} {
		if _, err := os.Lstat(filepath.Join(outside, n)); err == nil {
			t.Errorf("a hostile archive wrote %s beside the sandbox's root", n)
		}
	}
}
