//go:build linux

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/receipt"
)

// TestReceiptRun: run --receipt writes a signed receipt (0600) of the
// run whatever its exit status, with the hash of its stdout then its
// stderr, while the output still reaches the terminal; the key is made
// 0600 in a 0700 directory; receipt verify passes it and fails every
// tampered copy with upstream's messages (exit 1), a file that is not a
// receipt with 125; replay reruns it and tells a changed output; the
// audit log has receipt_issued.
func TestReceiptRun(t *testing.T) {
	a, ref := withRegistry(t)
	os.WriteFile(filepath.Join(a.dir, "data.txt"), []byte("one\n"), 0o644)
	file := filepath.Join(a.dir, "out", "r.json")
	r := a.run("run", "--receipt", file, "--image", ref, "--", "sh", "-c", "cat data.txt; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "one\n" || !strings.Contains(r.stderr, "err\n") {
		t.Fatalf("run --receipt: %v", r)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("receipt file: %v %v", st, err)
	}
	keyDir := filepath.Join(a.home, ".agentkernel", "receipts")
	if st, err := os.Stat(filepath.Join(keyDir, "ed25519_signing_key.pkcs8")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if st, err := os.Stat(keyDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("key dir: %v %v", st, err)
	}
	data, _ := os.ReadFile(file)
	var doc struct {
		Version    int
		Invocation struct {
			Mode  string
			Input struct {
				Command []string
				Image   *string
				Backend *string
				Profile string
				Fast    bool
			}
		}
		Outcome struct {
			ExitCode     int     `json:"exit_code"`
			Success      bool    `json:"success"`
			OutputSHA256 string  `json:"output_sha256"`
			OutputBytes  int     `json:"output_bytes"`
			Error        *string `json:"error"`
		}
		Signature *struct {
			KeyID string `json:"key_id"`
		}
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("receipt: %v\n%s", err, data)
	}
	sum := sha256.Sum256([]byte("one\nerr\n"))
	in := doc.Invocation.Input
	if doc.Version != 1 || doc.Invocation.Mode != "run" || strings.Join(in.Command, " ") != "sh -c cat data.txt; echo err >&2; exit 3" ||
		in.Image == nil || *in.Image != ref || in.Backend != nil || in.Profile != "moderate" || !in.Fast ||
		doc.Outcome.ExitCode != 3 || doc.Outcome.Success || doc.Outcome.OutputSHA256 != hex.EncodeToString(sum[:]) ||
		doc.Outcome.OutputBytes != 8 || doc.Outcome.Error != nil || doc.Signature == nil {
		t.Fatalf("receipt contents: %+v\n%s", doc, data)
	}

	r = a.run("receipt", "verify", file)
	if r.code != 0 || !strings.Contains(r.stdout, "verified") || !strings.Contains(r.stdout, doc.Signature.KeyID) {
		t.Fatalf("verify: %v", r)
	}

	// Tampered copies.
	s := string(data)
	tampered := func(name, content string, want int, msg string, extra ...string) {
		t.Helper()
		p := filepath.Join(a.dir, name+".json")
		os.WriteFile(p, []byte(content), 0o600)
		r := a.run(append([]string{"receipt", "verify", p}, extra...)...)
		if r.code != want || !strings.Contains(r.stderr, msg) {
			t.Errorf("verify %s: want exit %d and %q, got %v", name, want, msg, r)
		}
	}
	tampered("payload", strings.Replace(s, `"output_bytes": 8`, `"output_bytes": 9`, 1), 1, "Receipt hash mismatch: expected ")
	var sig struct {
		Signature struct{ Signature, PublicKey string }
	}
	json.Unmarshal(data, &sig)
	raw, _ := base64.StdEncoding.DecodeString(sig.Signature.Signature)
	raw[10] ^= 1
	tampered("signature", strings.Replace(s, sig.Signature.Signature, base64.StdEncoding.EncodeToString(raw), 1), 1, "Invalid receipt signature")
	kid := []byte(doc.Signature.KeyID)
	kid[0] = "01"[map[bool]int{true: 1, false: 0}[kid[0] == '0']]
	tampered("keyid", strings.Replace(s, doc.Signature.KeyID, string(kid), 1), 1, "Signature key ID mismatch: expected "+doc.Signature.KeyID+", found "+string(kid))
	tampered("version", strings.Replace(s, `"version": 1`, `"version": 2`, 1), 1, "Unsupported receipt version 2 (expected 1)")
	unsigned := s[:strings.Index(s, `"signature": {`)] + `"signature": null}`
	tampered("unsigned", unsigned, 1, "Receipt is unsigned. Pass --allow-unsigned to verify legacy receipts.")
	tampered("unsigned-allowed", unsigned, 0, "", "--allow-unsigned")
	tampered("notjson", "not a receipt", 125, "not JSON")
	tampered("missing", strings.Replace(s, `"outcome"`, `"outcomes"`, 1), 125, "outcome")
	if r := a.run("receipt", "verify", filepath.Join(a.dir, "nothing.json")); r.code != 125 {
		t.Errorf("verify of a missing file: %v", r)
	}

	// Replay: the same outcome, then a changed one.
	r = a.run("receipt", "replay", file)
	if r.code != 0 || r.stdout != "one\n" || !strings.Contains(r.stderr, "exit code 3, as recorded") || !strings.Contains(r.stderr, "output matches") {
		t.Fatalf("replay: %v", r)
	}
	os.WriteFile(filepath.Join(a.dir, "data.txt"), []byte("two\n"), 0o644)
	r = a.run("receipt", "replay", file)
	if r.code != 3 || r.stdout != "two\n" || !strings.Contains(r.stderr, "output differs") {
		t.Fatalf("replay of a changed output: %v", r)
	}
	// A tampered receipt is not replayed.
	if r := a.run("receipt", "replay", filepath.Join(a.dir, "payload.json")); r.code != 125 || !strings.Contains(r.stderr, "Receipt hash mismatch") || r.stdout != "" {
		t.Errorf("replay of a tampered receipt: %v", r)
	}

	// The audit log.
	log, _ := os.ReadFile(filepath.Join(a.dataDir, "audit.jsonl"))
	if !bytes.Contains(log, []byte(`"action":"receipt_issued"`)) || !bytes.Contains(log, []byte(file)) {
		t.Errorf("audit log has no receipt_issued entry:\n%s", log)
	}

	// What verifies here verifies with package receipt too (the same
	// code upstream's format is tested with).
	rc, err := receipt.Load(file)
	if err != nil || receipt.Verify(rc, false) != nil {
		t.Errorf("package receipt: %v", err)
	}
}

// TestReceiptRefusals: a symbolic link at FILE, or a signing key open to
// other users, is refused before anything runs; --receipt with -d or
// --dry-run is a usage error.
func TestReceiptRefusals(t *testing.T) {
	a, ref := withRegistry(t)
	target := filepath.Join(a.dir, "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	link := filepath.Join(a.dir, "link.json")
	os.Symlink(target, link)
	r := a.run("run", "--receipt", link, "--image", ref, "--", "sh", "-c", "echo ran; touch /workspace/ran")
	if r.code != 125 || !strings.Contains(r.stderr, "symbolic link") || strings.Contains(r.stdout, "ran") {
		t.Errorf("receipt at a symlink: %v", r)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Error("the symlink's target was written")
	}
	a.must("run", "--receipt", filepath.Join(a.dir, "ok.json"), "--image", ref, "--", "true")
	key := filepath.Join(a.home, ".agentkernel", "receipts", "ed25519_signing_key.pkcs8")
	os.Chmod(key, 0o644)
	r = a.run("run", "--receipt", filepath.Join(a.dir, "r2.json"), "--image", ref, "--", "echo", "ran")
	if r.code != 125 || !strings.Contains(r.stderr, "chmod 600 "+key) || r.stdout != "" {
		t.Errorf("open key: %v", r)
	}
	os.Chmod(key, 0o600)
	for _, args := range [][]string{
		{"run", "--receipt", "x.json", "--dry-run", "--image", ref, "--", "true"},
		{"run", "--receipt", "x.json", "-d", "--image", ref},
	} {
		if r := a.run(args...); r.code != 125 {
			t.Errorf("%v: %v", args, r)
		}
	}
}

// TestReceiptExec: exec --receipt (through the agentkernel binary, which
// hands it to agentkernel-full) records the exec's sandbox, env and
// workdir, and verifies; --receipt with -d is refused; run --keep
// --receipt records a run with keep.
func TestReceiptExec(t *testing.T) {
	a, ref := newSandbox(t, "rcpt")
	file := filepath.Join(a.dir, "e.json")
	r := a.run("exec", "--receipt", file, "-e", "A=b", "-w", "/tmp", "rcpt", "--", "sh", "-c", "echo $A; pwd")
	if r.code != 0 || r.stdout != "b\n/tmp\n" {
		t.Fatalf("exec --receipt: %v", r)
	}
	rc, err := receipt.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	x := rc.Invocation.Exec
	sum := sha256.Sum256([]byte("b\n/tmp\n"))
	if x == nil || x.Name != "rcpt" || strings.Join(x.Env, ",") != "A=b" || x.Workdir == nil || *x.Workdir != "/tmp" ||
		rc.Outcome.OutputSHA256 != hex.EncodeToString(sum[:]) || receipt.Verify(rc, false) != nil {
		t.Fatalf("exec receipt: %+v %+v", rc, x)
	}
	if r := a.run("receipt", "replay", file); r.code != 0 || r.stdout != "b\n/tmp\n" {
		t.Errorf("exec replay: %v", r)
	}
	if r := a.run("exec", "--receipt", file, "-d", "rcpt", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--receipt and -d") {
		t.Errorf("exec -d --receipt: %v", r)
	}

	kept := filepath.Join(a.dir, "k.json")
	r = a.run("run", "--keep", "--name", "rk", "--receipt", kept, "--image", ref, "--", "echo", "kept")
	t.Cleanup(func() { a.run("rm", "-f", "rk") })
	if r.code != 0 || r.stdout != "kept\n" {
		t.Fatalf("run --keep --receipt: %v", r)
	}
	rc, err = receipt.Load(kept)
	if err != nil || rc.Invocation.Run == nil || !rc.Invocation.Run.Keep || receipt.Verify(rc, false) != nil {
		t.Fatalf("kept run's receipt: %v %+v", err, rc)
	}
}

// TestReceiptWithDaemon: with a daemon running, a run with --receipt is
// built here (the daemon would write to the terminal directly), so its
// receipt holds the output's hash.
func TestReceiptWithDaemon(t *testing.T) {
	a := newAK(t)
	a.must("daemon", "start")
	t.Cleanup(func() { a.run("daemon", "stop") })
	file := filepath.Join(a.dir, "d.json")
	r := a.run("run", "--receipt", file, "--image", "host", "--", "sh", "-c", "echo out; echo err >&2")
	if r.code != 0 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Fatalf("run --receipt with a daemon: %v", r)
	}
	rc, err := receipt.Load(file)
	sum := sha256.Sum256([]byte("out\nerr\n"))
	if err != nil || rc.Outcome.OutputSHA256 != hex.EncodeToString(sum[:]) || rc.Outcome.OutputBytes != 8 || receipt.Verify(rc, false) != nil {
		t.Fatalf("receipt: %v %+v", err, rc)
	}
}
