//go:build linux

package e2e

// Everyday commands that must fail loudly or report real figures: cp,
// stats, daemon status, plugin install.

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCpFailuresAndTarStreams: cp into and out of a real sandbox, through
// the agentkernel binary and agentkernel-full alike: a missing source on
// either side fails (exit status 125) naming it and copies nothing; "-"
// is a tar stream as in docker cp (stdin extracted into a directory,
// stdout written), never a host file called "-"; input that is not a tar
// archive fails.
func TestCpFailuresAndTarStreams(t *testing.T) {
	a, _ := newSandbox(t, "cpx")
	full := filepath.Join(filepath.Dir(binary), "agentkernel-full")
	a.must("exec", "cpx", "--", "sh", "-c", "mkdir -p /root/d/sub && echo one > /root/d/sub/f && echo top > /tmp/f")
	for _, bin := range []string{"", full} {
		a.bin = bin
		name := filepath.Base(binary)
		if bin != "" {
			name = filepath.Base(bin)
		}
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"cp", "typo.txt", "cpx:/root/"}, "typo.txt: no such file or directory"},
			{[]string{"cp", "/no/such/file", "cpx:/root/"}, "/no/such/file: no such file or directory"},
			{[]string{"cp", "cpx:/no/such/file", "out"}, "/no/such/file: no such file or directory in the sandbox"},
			{[]string{"cp", "cpx:/no/such/file", "-"}, "/no/such/file: no such file or directory in the sandbox"},
		} {
			r := a.run(c.args...)
			if r.code != 125 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
				t.Errorf("%s %v: %v, want exit 125 and %q", name, c.args, r, c.want)
			}
		}
		if ents, _ := os.ReadDir(a.dir); len(ents) != 0 {
			t.Errorf("%s: failed copies left %v in the working directory", name, ents)
		}

		// Out as a tar stream: the directory, named by its base name.
		r := a.must("cp", "cpx:/root/d", "-")
		got := map[string]string{}
		tr := tar.NewReader(strings.NewReader(r.stdout))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s cp cpx:/root/d -: %v", name, err)
			}
			b, _ := io.ReadAll(tr)
			got[h.Name] = string(b)
		}
		if got["d/sub/f"] != "one\n" || len(got) != 3 {
			t.Errorf("%s cp cpx:/root/d -: %q", name, got)
		}
		if _, err := os.Lstat(filepath.Join(a.dir, "-")); err == nil {
			t.Errorf("%s cp cpx:/root/d - wrote a file called -", name)
		}

		// In from a tar stream: what 'cp NAME:PATH -' wrote goes back in.
		a.must("exec", "cpx", "--", "sh", "-c", "rm -rf /tmp/back && mkdir /tmp/back")
		a.stdin = r.stdout
		a.must("cp", "-", "cpx:/tmp/back")
		a.stdin = ""
		if r := a.must("exec", "cpx", "--", "cat", "/tmp/back/d/sub/f"); r.stdout != "one\n" {
			t.Errorf("%s cp - cpx:/tmp/back: %v", name, r)
		}
		// echo hi | cp - NAME:/tmp/y: not a tar archive, nothing written.
		a.stdin = "hi\n"
		if r := a.run("cp", "-", "cpx:/tmp"); r.code != 125 || !strings.Contains(r.stderr, "not a tar archive") {
			t.Errorf("%s echo hi | cp - cpx:/tmp: %v", name, r)
		}
		if r := a.run("cp", "-", "cpx:/tmp/y"); r.code != 125 || !strings.Contains(r.stderr, "/tmp/y: no such file or directory in the sandbox") {
			t.Errorf("%s echo hi | cp - cpx:/tmp/y: %v", name, r)
		}
		a.stdin = ""
		if r := a.run("exec", "cpx", "--", "test", "-e", "/tmp/y"); r.code == 0 {
			t.Errorf("%s: /tmp/y was made", name)
		}
	}
	a.bin = ""

	// A hostile archive stays inside the sandbox.
	outside := t.TempDir()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []*tar.Header{
		{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "/"},
		{Name: "up" + outside + "/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
		{Name: "../../../.." + outside + "/pwned2", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
	} {
		tw.WriteHeader(h)
		if h.Size > 0 {
			tw.Write([]byte("pwned\n"))
		}
	}
	tw.Close()
	a.stdin = b.String()
	a.run("cp", "-", "cpx:/tmp")
	a.stdin = ""
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("a hostile archive wrote %v on the host", ents)
	}
}

// TestStatsDiskOfRunningSandbox: stats reports the writable layer of a
// running sandbox (what it wrote), in both binaries, not 0B.
func TestStatsDiskOfRunningSandbox(t *testing.T) {
	a, _ := newSandbox(t, "disk")
	a.must("exec", "disk", "--", "sh", "-c", "dd if=/dev/zero of=/root/blob bs=1024 count=3072 2>/dev/null")
	full := filepath.Join(filepath.Dir(binary), "agentkernel-full")
	for _, bin := range []string{"", full} {
		a.bin = bin
		r := a.must("stats", "--json", "disk")
		var st struct {
			Sandboxes []struct {
				Status     string `json:"status"`
				UpperBytes int64  `json:"upper_bytes"`
			} `json:"sandboxes"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st.Sandboxes) != 1 || st.Sandboxes[0].Status != "running" ||
			st.Sandboxes[0].UpperBytes < 3<<20 || st.Sandboxes[0].UpperBytes > 4<<20 {
			t.Errorf("%s stats --json disk: %v %s", bin, err, r.stdout)
		}
		r = a.must("stats", "disk")
		if !regexp.MustCompile(`\ndisk +running .* 3\.[0-9]MiB +[0-9.]+[KMG]?i?B\n`).MatchString(r.stdout) {
			t.Errorf("%s stats disk, want DISK 3.xMiB:\n%s", bin, r.stdout)
		}
	}
}

// TestDaemonStatusUptime: a real daemon's status says how long it has
// run, not "up 0s".
func TestDaemonStatusUptime(t *testing.T) {
	a := newAK(t)
	a.must("daemon", "start")
	t.Cleanup(func() { a.run("daemon", "stop") })
	time.Sleep(2100 * time.Millisecond)
	r := a.must("daemon", "status")
	if !regexp.MustCompile(`running \(pid \d+, up [2-9]s\)`).MatchString(r.stdout) {
		t.Errorf("daemon status: %v", r)
	}
	r = a.must("daemon", "status", "--json")
	var st struct {
		Uptime int64 `json:"uptime_seconds"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.Uptime < 2 || st.Uptime > 60 {
		t.Errorf("daemon status --json: %v %v", err, r)
	}
}

// TestPluginInstallAllOrNothing: 'plugin install claude' with an invalid
// .mcp.json fails (exit status 125) naming it, and writes neither the
// skill nor the command.
func TestPluginInstallAllOrNothing(t *testing.T) {
	a := newAK(t)
	bad := "{\"mcpServers\": {\n  // a comment\n}}\n"
	mcpJSON := filepath.Join(a.dir, ".mcp.json")
	if err := os.WriteFile(mcpJSON, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	r := a.run("plugin", "install", "claude")
	if r.code != 125 || !strings.Contains(r.stdout, ".mcp.json: not valid JSON") || !strings.Contains(r.stderr, "no file of a failed target was written") {
		t.Errorf("install over an invalid .mcp.json: %v", r)
	}
	if _, err := os.Lstat(filepath.Join(a.dir, ".claude")); err == nil {
		t.Error("the skill or the command was written")
	}
	if b, _ := os.ReadFile(mcpJSON); string(b) != bad {
		t.Errorf(".mcp.json became %q", b)
	}
}
