package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ptr(s string) *string { return &s }

// specExample is the receipt of the spec's example run (upstream's own
// test receipt): python3 -c "print('ok')" that printed "ok\n".
func specExample() *Receipt {
	return &Receipt{
		Version:    1,
		ReceiptID:  "test-receipt-1",
		RecordedAt: "2026-02-23T00:00:00Z",
		Invocation: Invocation{Mode: ModeRun, Run: &Run{
			Command: []string{"python3", "-c", "print('ok')"},
			Image:   ptr("python:3.12-alpine"), Backend: ptr("docker"),
			Profile: "moderate",
		}},
		Outcome: NewOutcome(0, sha256.Sum256([]byte("ok\n")), 3, ""),
	}
}

// The payload's bytes, written by hand from the format: field order,
// nulls, compact.
const specPayload = `{"version":1,"receipt_id":"test-receipt-1","recorded_at":"2026-02-23T00:00:00Z",` +
	`"invocation":{"mode":"run","input":{"command":["python3","-c","print('ok')"],"image":"python:3.12-alpine","backend":"docker","profile":"moderate","no_network":false,"fast":false,"keep":false}},` +
	`"outcome":{"exit_code":0,"success":true,"output_sha256":"dc51b8c96c2d745df3bd5590d990230a482fd247123599548e0632fdbf97fc22","output_bytes":3,"error":null}}`

func TestPayloadSpecExample(t *testing.T) {
	r := specExample()
	want := specPayload
	if r.Outcome.OutputSHA256 != "dc51b8c96c2d745df3bd5590d990230a482fd247123599548e0632fdbf97fc22" {
		t.Fatalf("sha256(ok\\n) = %s", r.Outcome.OutputSHA256)
	}
	got, err := r.Payload()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("payload\n got %s\nwant %s", got, want)
	}
	// The hash of the same payload from another serializer (Python's
	// json.dumps with separators (",", ":") and ensure_ascii=False).
	if err := r.Seal(nil); err != nil || r.PayloadHashSHA256 != "8d6518899a457f0d67661bc53a67531554d35aa9bc46ca13dc3aaf5af4bc4939" {
		t.Fatalf("payload hash %s (%v)", r.PayloadHashSHA256, err)
	}
}

// serde_json's escapes: only '"', '\\' and control characters; <, >, &,
// DEL, U+2028 and non-ASCII written as they are, in UTF-8.
func TestPayloadEscapes(t *testing.T) {
	r := &Receipt{
		Version:    1,
		ReceiptID:  "id",
		RecordedAt: "t",
		Invocation: Invocation{Mode: ModeExec, Exec: &Exec{
			Name:    "dev",
			Command: []string{"sh", "-c", "echo \"<a&b>\" \\ \b\f\n\r\t\x00\x01\x1f\x7f é 日本 \u2028"},
			Env:     []string{},
			Sudo:    true,
		}},
		Outcome: Outcome{ExitCode: -1, OutputSHA256: "h", OutputBytes: 18446744073709551615, Error: ptr("bad \"thing\"")},
	}
	want := `{"version":1,"receipt_id":"id","recorded_at":"t","invocation":{"mode":"exec","input":{"name":"dev","command":["sh","-c",` +
		`"echo \"<a&b>\" \\ \b\f\n\r\t\u0000\u0001\u001f` + "\x7f é 日本 \u2028" + `"],"env":[],"workdir":null,"sudo":true}},` +
		`"outcome":{"exit_code":-1,"success":false,"output_sha256":"h","output_bytes":18446744073709551615,"error":"bad \"thing\""}}`
	got, err := r.Payload()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("payload\n got %s\nwant %s", got, want)
	}
	// A nil slice is an empty array, never null.
	r.Invocation.Exec.Env = nil
	if got, _ := r.Payload(); !bytes.Contains(got, []byte(`"env":[]`)) {
		t.Fatalf("nil env: %s", got)
	}
	// serde's pretty printer writes an empty array as [].
	if file, err := Marshal(r); err != nil || !bytes.Contains(file, []byte("\"env\": [],\n")) || !bytes.Contains(file, []byte("\"workdir\": null,\n")) {
		t.Fatalf("file: %s (%v)", file, err)
	}
	// Not UTF-8: no payload.
	r.Invocation.Exec.Command = []string{"\xff"}
	if _, err := r.Payload(); err == nil {
		t.Fatal("invalid UTF-8 encoded")
	}
}

// A receipt in upstream's file form (serde's pretty printer), written by
// hand, parses and verifies; ours is written in the same form.
func TestUpstreamFileForm(t *testing.T) {
	r := specExample()
	if err := r.Seal(nil); err != nil {
		t.Fatal(err)
	}
	file := `{
  "version": 1,
  "receipt_id": "test-receipt-1",
  "recorded_at": "2026-02-23T00:00:00Z",
  "invocation": {
    "mode": "run",
    "input": {
      "command": [
        "python3",
        "-c",
        "print('ok')"
      ],
      "image": "python:3.12-alpine",
      "backend": "docker",
      "profile": "moderate",
      "no_network": false,
      "fast": false,
      "keep": false
    }
  },
  "outcome": {
    "exit_code": 0,
    "success": true,
    "output_sha256": "dc51b8c96c2d745df3bd5590d990230a482fd247123599548e0632fdbf97fc22",
    "output_bytes": 3,
    "error": null
  },
  "payload_hash_sha256": "` + r.PayloadHashSHA256 + `",
  "signature": null
}`
	got, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != file {
		t.Fatalf("file\n got %s\nwant %s", got, file)
	}
	p, err := Parse([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(p, true); err != nil {
		t.Fatal(err)
	}
	if err := Verify(p, false); err == nil || err.Error() != "Receipt is unsigned. Pass --allow-unsigned to verify legacy receipts." || !errors.Is(err, ErrVerify) {
		t.Fatalf("unsigned without --allow-unsigned: %v", err)
	}
}

func testKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
}

// flip changes one byte of s at i to another base64 or hex digit.
func flip(s string, i int) string {
	b := []byte(s)
	if b[i] == 'A' || b[i] == '0' {
		b[i]++
	} else {
		b[i]--
	}
	return string(b)
}

func TestTamper(t *testing.T) {
	key := testKey()
	r, err := New(specExample().Invocation, specExample().Outcome, time.Date(2026, 2, 23, 1, 2, 3, 400_000_000, time.UTC), key)
	if err != nil {
		t.Fatal(err)
	}
	if r.RecordedAt != "2026-02-23T01:02:03.400+00:00" {
		t.Fatalf("recorded_at %s", r.RecordedAt)
	}
	if len(r.ReceiptID) != 36 || r.ReceiptID[14] != '7' {
		t.Fatalf("receipt_id %s is not a UUID v7", r.ReceiptID)
	}
	file, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, data string, allowUnsigned bool, want string) {
		t.Helper()
		p, err := Parse([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		err = Verify(p, allowUnsigned)
		if want == "" {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return
		}
		if err == nil || !strings.HasPrefix(err.Error(), want) || !errors.Is(err, ErrVerify) {
			t.Fatalf("%s: got %v, want %q", name, err, want)
		}
	}
	check("untouched", string(file), false, "")
	s := string(file)
	// One byte of the payload: the output's hash.
	i := strings.Index(s, r.Outcome.OutputSHA256)
	check("payload byte", s[:i]+flip(s[i:], 0), false, "Receipt hash mismatch: expected ")
	// One byte of the command.
	check("command byte", strings.Replace(s, "print('ok')", "print('ko')", 1), true, "Receipt hash mismatch")
	// One byte of the signature.
	sig, _ := base64.StdEncoding.DecodeString(r.Signature.Signature)
	sig[3] ^= 0x10
	check("signature byte", strings.Replace(s, r.Signature.Signature, base64.StdEncoding.EncodeToString(sig), 1), false, "Invalid receipt signature")
	// One byte of the key id.
	i = strings.Index(s, `"key_id": "`) + len(`"key_id": "`)
	check("key id byte", s[:i]+flip(s[i:], 3), false, "Signature key ID mismatch: expected "+r.Signature.KeyID)
	// Another key's public key and id, with this signature.
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32)).Public().(ed25519.PublicKey)
	t2 := strings.Replace(s, r.Signature.PublicKey, base64.StdEncoding.EncodeToString(other), 1)
	t2 = strings.Replace(t2, r.Signature.KeyID, KeyID(other), 1)
	check("other key", t2, false, "Invalid receipt signature")
	// Version 2.
	check("version", strings.Replace(s, `"version": 1`, `"version": 2`, 1), false, "Unsupported receipt version 2 (expected 1)")
	// Another algorithm; the same one in capitals is accepted.
	check("algorithm", strings.Replace(s, `"ed25519"`, `"rsa"`, 1), false, "Unsupported signature algorithm 'rsa'")
	check("algorithm case", strings.Replace(s, `"ed25519"`, `"Ed25519"`, 1), false, "")
	// The signature dropped: unsigned, accepted only with --allow-unsigned.
	sigAt := strings.Index(s, `"signature": {`)
	unsigned := s[:sigAt] + `"signature": null` + "\n}"
	check("unsigned", unsigned, false, "Receipt is unsigned. Pass --allow-unsigned to verify legacy receipts.")
	check("unsigned allowed", unsigned, true, "")
}

func TestParseBadInput(t *testing.T) {
	r := specExample()
	_ = r.Seal(testKey())
	good, _ := Marshal(r)
	for name, data := range map[string]string{
		"empty":         "",
		"not json":      "hello",
		"trailing":      string(good) + "x",
		"array":         "[]",
		"not utf8":      "{\"version\":1,\"x\":\"\xff\"}",
		"missing":       strings.Replace(string(good), `"receipt_id"`, `"receipt_idx"`, 1),
		"duplicate":     strings.Replace(string(good), `"receipt_id": "test-receipt-1",`, `"receipt_id": "a", "receipt_id": "b",`, 1),
		"case":          strings.Replace(string(good), `"version"`, `"Version"`, 1),
		"mode":          strings.Replace(string(good), `"mode": "run"`, `"mode": "walk"`, 1),
		"negative size": strings.Replace(string(good), `"output_bytes": 3`, `"output_bytes": -3`, 1),
		"float":         strings.Replace(string(good), `"exit_code": 0`, `"exit_code": 0.5`, 1),
		"big exit":      strings.Replace(string(good), `"exit_code": 0`, `"exit_code": 4294967296`, 1),
		"null bool":     strings.Replace(string(good), `"fast": false`, `"fast": null`, 1),
	} {
		if _, err := Parse([]byte(data)); !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Unknown fields are ignored, absent optionals are null.
	data := strings.Replace(string(good), `"image": "python:3.12-alpine",`, `"extra": [1,{"a":2}],`, 1)
	p, err := Parse([]byte(data))
	if err != nil || p.Invocation.Run.Image != nil {
		t.Fatalf("unknown field, absent image: %v", err)
	}
}

func TestReplayArgs(t *testing.T) {
	r := specExample()
	r.Invocation.Run.NoNetwork, r.Invocation.Run.Fast = true, true
	got := strings.Join(ReplayArgs(r), " ")
	if want := "run --image python:3.12-alpine -B docker --fast --no-network --profile moderate -- python3 -c print('ok')"; got != want {
		t.Fatalf("run: %s", got)
	}
	r.Invocation = Invocation{Mode: ModeExec, Exec: &Exec{Name: "dev", Command: []string{"pytest", "-q"}, Env: []string{"FOO=bar", "DEBUG=1"}, Workdir: ptr("/workspace"), Sudo: true}}
	got = strings.Join(ReplayArgs(r), " ")
	if want := "exec --env FOO=bar --env DEBUG=1 --workdir /workspace --sudo dev -- pytest -q"; got != want {
		t.Fatalf("exec: %s", got)
	}
}

func TestFormatTime(t *testing.T) {
	for ns, want := range map[int]string{
		0:           "2026-01-02T03:04:05+00:00",
		120_000_000: "2026-01-02T03:04:05.120+00:00",
		120_500_000: "2026-01-02T03:04:05.120500+00:00",
		1:           "2026-01-02T03:04:05.000000001+00:00",
	} {
		if got := FormatTime(time.Date(2026, 1, 2, 3, 4, 5, ns, time.FixedZone("x", 3600)).Add(time.Hour)); got != want {
			t.Errorf("%d: %s, want %s", ns, got, want)
		}
	}
}

func TestKeyFile(t *testing.T) {
	home := t.TempDir()
	k1, err := LoadOrCreateKey(home)
	if err != nil {
		t.Fatal(err)
	}
	dir := KeyDir(home)
	path := filepath.Join(dir, KeyFile)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Fatalf("key dir mode %v", st.Mode())
	}
	der, _ := os.ReadFile(path)
	// PKCS#8 v2 DER with the public key, as upstream's ring writes it.
	if len(der) != 85 || !bytes.HasPrefix(der, v2Prefix) || !bytes.HasSuffix(der, k1.Public().(ed25519.PublicKey)) {
		t.Fatalf("key file is not PKCS#8 v2: %x", der)
	}
	k2, err := LoadOrCreateKey(home)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("second load: %v", err)
	}
	// A v1 key (Go's own) is read too.
	v1, _ := x509.MarshalPKCS8PrivateKey(testKey())
	if k, err := ParseKey(v1); err != nil || !k.Equal(testKey()) {
		t.Fatalf("v1: %v", err)
	}
	// A v2 key whose public key is not its own is refused.
	bad := MarshalKey(testKey())
	bad[len(bad)-1] ^= 1
	if _, err := ParseKey(bad); err == nil {
		t.Fatal("mismatched public key accepted")
	}
	// Open to others: refused with a chmod hint.
	os.Chmod(path, 0o640)
	if _, err := LoadOrCreateKey(home); err == nil || !strings.Contains(err.Error(), "chmod 600 "+path) {
		t.Fatalf("group-readable key: %v", err)
	}
	os.Chmod(path, 0o600)
	os.Chmod(dir, 0o755)
	if _, err := LoadOrCreateKey(home); err == nil || !strings.Contains(err.Error(), "chmod 700 "+dir) {
		t.Fatalf("open directory: %v", err)
	}
	os.Chmod(dir, 0o700)
	// A symbolic link at the key's place is not followed.
	os.Rename(path, path+".real")
	os.Symlink(path+".real", path)
	if _, err := LoadOrCreateKey(home); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlinked key: %v", err)
	}
	// Not the user's.
	if os.Geteuid() == 0 {
		os.Remove(path)
		os.Rename(path+".real", path)
		os.Chown(path, 1234, 1234)
		if _, err := LoadOrCreateKey(home); err == nil || !strings.Contains(err.Error(), "owned by uid 1234") {
			t.Fatalf("foreign key: %v", err)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	r := specExample()
	_ = r.Seal(testKey())
	path := filepath.Join(dir, "sub", "r.json")
	if err := Write(path, r); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	got, err := Load(path)
	if err != nil || Verify(got, false) != nil {
		t.Fatalf("load: %v", err)
	}
	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("keep"), 0o644)
	link := filepath.Join(dir, "link.json")
	os.Symlink(target, link)
	if err := Write(link, r); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("symlink: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatal("symlink target written")
	}
}
