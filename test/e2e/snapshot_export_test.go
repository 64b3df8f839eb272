//go:build linux

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// treeScript prints the root file system a sandbox sees: every path on
// the root's own mount (the sandbox's mounts left out) with its type,
// owner, mode, size and link target, and each regular file's checksum.
const treeScript = `cd / && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./tmp -o -path ./workspace -o -path ./etc/hosts -o -path ./etc/hostname -o -path ./etc/resolv.conf \) -prune -o -print | sort | while IFS= read -r f; do
  if [ -L "$f" ]; then echo "$f L $(stat -c '%u:%g' "$f") -> $(readlink "$f")"
  elif [ -d "$f" ]; then echo "$f D $(stat -c '%u:%g %a' "$f")"
  elif [ -f "$f" ]; then echo "$f F $(stat -c '%u:%g %a %s %h' "$f") $(md5sum < "$f" | cut -c1-32)"
  else echo "$f O $(stat -c '%u:%g %a %F' "$f")"; fi
done`

// exportChanges adds, modifies and deletes files of the test image: a
// new file of another user, a set-uid file, a symlink, hard links, a
// file deleted from a lower layer, a deleted directory, a directory
// deleted and made again (opaque: /home/app must stay gone).
const exportChanges = `set -e
echo added > /root/added
mkdir -p /srv/u && echo f > /srv/u/f && chown -R 1000:1001 /srv/u && chmod 640 /srv/u/f
printf '#!/bin/sh\necho suid\n' > /usr/bin/suidx && chmod 4755 /usr/bin/suidx
ln -s /etc/passwd /root/link
echo hl > /root/hl1 && ln /root/hl1 /root/hl2
echo extra >> /etc/group
rm /etc/agentkernel-test
rm -rf /usr/sbin
rm -rf /home && mkdir /home && echo only > /home/only`

// TestSnapshotExport: a snapshot exported into the image store runs in
// a new sandbox (run --image and sandbox create --image) with exactly
// the snapshot's file system: additions, changes, deletions of a file
// and of a directory, an opaque directory, owners, set-id bits, links;
// the same through a 'docker save' tarball (-o FILE, -o -) loaded with
// 'images load', whose layers carry OCI whiteouts and the image's ids;
// bad input (unknown or invalid snapshot, a bad --tag, an output path
// that is a symlink, a terminal, a file the image would read as a
// whiteout) exits 125 and writes nothing.
func TestSnapshotExport(t *testing.T) {
	a, _ := newSandbox(t, "expsrc")
	a.sh("expsrc", exportChanges)
	want := a.sh("expsrc", treeScript)
	for _, s := range []string{"./root/added F 0:0 644", "./srv/u/f F 1000:1001 640", "./usr/bin/suidx F 0:0 4755", "./root/hl1 F 0:0 644 3 2", "./home/only"} {
		if !strings.Contains(want, s) {
			t.Fatalf("set-up: %q not in\n%s", s, want)
		}
	}
	for _, s := range []string{"./etc/agentkernel-test", "./usr/sbin", "./home/app"} {
		if strings.Contains(want, s) {
			t.Fatalf("set-up: %q still there", s)
		}
	}
	a.must("snapshot", "take", "expsrc", "--name", "exp1")

	// Into the store, under the default tag.
	r := a.must("snapshot", "export", "exp1")
	if !strings.Contains(r.stdout, "agentkernel-snap:exp1@sha256:") {
		t.Fatalf("export: %v", r)
	}
	exported := false
	for _, e := range a.audit("--sandbox", "expsrc") {
		exported = exported || e.Action == "snapshot_export" && e.Details == "snapshot exp1 to agentkernel-snap:exp1" && e.Error == ""
	}
	if !exported {
		t.Errorf("the export is not in the audit log: %+v", a.audit("--sandbox", "expsrc"))
	}
	if got := a.must("run", "--pull", "never", "--image", "agentkernel-snap:exp1", "--", "sh", "-c", treeScript).stdout; got != want {
		t.Errorf("run --image of the export differs from the snapshot:\n%s", diffLines(want, got))
	}
	if got := a.must("run", "--pull", "never", "--image", "agentkernel-snap:exp1", "--", "/usr/bin/suidx").stdout; got != "suid\n" {
		t.Errorf("exported set-uid script: %q", got)
	}
	// The base image's config comes along (its Cmd, /bin/sh).
	var insps []struct {
		Config struct {
			Cmd []string `json:"cmd"`
		} `json:"config"`
		Layers []struct{} `json:"layers"`
	}
	if err := json.Unmarshal([]byte(a.must("images", "inspect", "agentkernel-snap:exp1").stdout), &insps); err != nil || len(insps) != 1 {
		t.Fatal(err, len(insps))
	}
	if insp := insps[0]; len(insp.Config.Cmd) != 1 || insp.Config.Cmd[0] != "/bin/sh" || len(insp.Layers) != 3 {
		t.Errorf("exported image: %+v", insps)
	}

	// A tarball: -o FILE, loaded back under its own tag.
	out := filepath.Join(t.TempDir(), "exp1.tar")
	a.must("snapshot", "export", "exp1", "--tag", "exp/archive:1", "-o", out)
	checkArchive(t, out)
	if r := a.must("images", "load", "-i", out); !strings.Contains(r.stdout, "exp/archive:1") {
		t.Fatalf("load: %v", r)
	}
	a.must("sandbox", "create", "expload", "--image", "exp/archive:1", "--pull", "never", "--start")
	t.Cleanup(func() { a.run("sandbox", "rm", "--force", "expload") })
	if got := a.sh("expload", treeScript); got != want {
		t.Errorf("a sandbox of the loaded archive differs from the snapshot:\n%s", diffLines(want, got))
	}
	// -o - writes the same archive to standard output.
	if r := a.must("snapshot", "export", "exp1", "--tag", "exp/archive:1", "-o", "-"); len(r.stdout) < 1024 || r.stdout[:512] == strings.Repeat("\x00", 512) {
		t.Errorf("-o -: %d bytes", len(r.stdout))
	} else if b, err := os.ReadFile(out); err != nil || string(b) != r.stdout {
		t.Errorf("-o - and -o FILE differ (%d and %d bytes, %v)", len(r.stdout), len(b), err)
	}

	// Bad input.
	target := filepath.Join(t.TempDir(), "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link.tar")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"snapshot", "export", "nosuch"}, `snapshot "nosuch" not found`},
		{[]string{"snapshot", "export", "../exp1"}, "invalid character"},
		{[]string{"snapshot", "export", "exp1", "--tag", "Bad Ref"}, "--tag"},
		{[]string{"snapshot", "export", "exp1", "--tag", "host"}, "reserved"},
		{[]string{"snapshot", "export", "exp1", "-o", link}, "symbolic link"},
		{[]string{"snapshot", "export", "exp1", "-o", filepath.Dir(link)}, "not a regular file"},
	} {
		if r := a.run(c.args...); r.code != 125 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: want exit 125 with %q: %v", c.args, c.msg, r)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	// A file the image would read as a deletion is refused, naming it,
	// and neither the store nor the output gets an image.
	a.sh("expsrc", `echo x > /root/.wh.passwd`)
	a.must("snapshot", "take", "expsrc", "--name", "exp2")
	noOut := filepath.Join(t.TempDir(), "exp2.tar")
	for _, args := range [][]string{{"snapshot", "export", "exp2"}, {"snapshot", "export", "exp2", "-o", noOut}} {
		if r := a.run(args...); r.code != 125 || !strings.Contains(r.stderr, "root/.wh.passwd") {
			t.Errorf("%v: want exit 125 naming the file: %v", args, r)
		}
	}
	if r := a.run("images", "inspect", "agentkernel-snap:exp2"); r.code == 0 {
		t.Errorf("a refused export left an image")
	}
	if ents, _ := os.ReadDir(filepath.Dir(noOut)); len(ents) != 0 {
		t.Errorf("a refused export left files: %v", ents)
	}
}

// checkArchive reads a 'docker save' tarball the way docker load does:
// manifest.json names the config and the layers; the snapshot's layer
// holds OCI whiteouts (a deleted file, a deleted directory, an opaque
// directory) and the image's ids, never the overlay's own marks.
func checkArchive(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	var m []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil || len(m) != 1 || len(m[0].Layers) != 3 || len(m[0].RepoTags) != 1 || !strings.HasSuffix(m[0].RepoTags[0], "exp/archive:1") {
		t.Fatalf("manifest.json: %v %s", err, files["manifest.json"])
	}
	if _, ok := files[m[0].Config]; !ok {
		t.Fatalf("no config %s", m[0].Config)
	}
	top := files[m[0].Layers[2]]
	seen := map[string]*tar.Header{}
	lr := tar.NewReader(strings.NewReader(string(top)))
	for {
		h, err := lr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[strings.TrimSuffix(h.Name, "/")] = h
		for k := range h.PAXRecords {
			if strings.Contains(k, "overlay.") {
				t.Errorf("%s carries %s", h.Name, k)
			}
		}
		if h.Typeflag == tar.TypeChar && h.Devmajor == 0 && h.Devminor == 0 {
			t.Errorf("%s: an overlay whiteout device in the layer", h.Name)
		}
	}
	for _, n := range []string{"etc/.wh.agentkernel-test", "usr/.wh.sbin", "home/.wh..wh..opq", "root/added"} {
		if seen[n] == nil {
			t.Errorf("snapshot layer: no %s", n)
		}
	}
	if h := seen["srv/u/f"]; h == nil || h.Uid != 1000 || h.Gid != 1001 || h.Mode != 0o640 {
		t.Errorf("srv/u/f: %+v", h)
	}
	if h := seen["usr/bin/suidx"]; h == nil || h.Uid != 0 || h.Mode != 0o4755 {
		t.Errorf("usr/bin/suidx: %+v", h)
	}
}

// diffLines shows the lines only in want (-) and only in got (+).
func diffLines(want, got string) string {
	w, g := map[string]bool{}, map[string]bool{}
	for _, l := range strings.Split(want, "\n") {
		w[l] = true
	}
	for _, l := range strings.Split(got, "\n") {
		g[l] = true
	}
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestSnapshotExportDuringDelete: a 'snapshot delete' started while an
// export of the snapshot is writing waits for it: the export finishes
// whole (the archive loads and holds the snapshot's files), then the
// delete succeeds and the snapshot is gone.
func TestSnapshotExportDuringDelete(t *testing.T) {
	a, _ := newSandbox(t, "expdel")
	a.sh("expdel", "head -c 134217728 /dev/zero > /root/big && echo small > /root/small")
	a.must("snapshot", "take", "expdel", "--name", "del1")
	dir := t.TempDir()
	out := filepath.Join(dir, "del1.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exp := a.cmd(ctx, "snapshot", "export", "del1", "--tag", "expdel/img:1", "-o", out)
	var expErr bytes.Buffer
	exp.Stderr = &expErr
	if err := exp.Start(); err != nil {
		t.Fatal(err)
	}
	exported := make(chan time.Time, 1)
	var waitErr error
	go func() { waitErr = exp.Wait(); exported <- time.Now() }()
	// The export is under way once its temporary file is there.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if tmps, _ := filepath.Glob(filepath.Join(dir, ".del1.tar.tmp-*")); len(tmps) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the export never started writing")
		}
	}
	del := a.run("snapshot", "delete", "del1")
	deleted := time.Now()
	expEnd := <-exported
	if waitErr != nil || del.code != 0 {
		t.Fatalf("export: %v %s; delete: %v", waitErr, expErr.String(), del)
	}
	if deleted.Before(expEnd) {
		t.Errorf("the delete finished %v before the export it must wait for", expEnd.Sub(deleted))
	}
	if r := a.must("snapshot", "list", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("the snapshot is still listed: %v", r)
	}
	a.must("images", "load", "-i", out)
	if got := a.must("run", "--pull", "never", "--image", "expdel/img:1", "--", "sh", "-c", "wc -c < /root/big; cat /root/small").stdout; got != "134217728\nsmall\n" {
		t.Errorf("the exported image: %q", got)
	}
}
