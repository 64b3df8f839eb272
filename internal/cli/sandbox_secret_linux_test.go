package cli

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
	"github.com/agentkernel/agentkernel/internal/secrets"
)

// TestSandboxCreateSecretRefusals: 'sandbox create -S' parses its
// bindings with run's parser and refuses bad ones (a malformed binding,
// no egress) with exit status 125 naming the problem, not pflag's
// "unknown flag", and creates nothing. (Bindings that are recorded need
// the network helper, agentkernel-full: test/e2e covers them.)
func TestSandboxCreateSecretRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		argv []string
		want string
	}{
		{[]string{"-S", "GH:api.github.test", "--network", "none"}, "needs network egress"},
		{[]string{"--secret", "GH"}, "expected KEY:HOST"},
		{[]string{"-S", "GH=hunter2-value"}, "needs the host after it"},
	} {
		argv := append([]string{"--data-dir", dir, "sandbox", "create", "box", "--image", "host"}, c.argv...)
		_, stderr, err := runCLI(t, dir, argv...)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitAgentkernel {
			t.Fatalf("%v: %v, want exit status 125", c.argv, err)
		}
		msg := ee.Error() + " " + ee.Hint + " " + stderr
		if !strings.Contains(msg, c.want) || strings.Contains(msg, "unknown") || strings.Contains(msg, "hunter2") {
			t.Errorf("%v: %q, want %q", c.argv, msg, c.want)
		}
	}
	out, _, err := runCLI(t, dir, "--data-dir", dir, "sandbox", "list")
	if err != nil || strings.Contains(out, "box") {
		t.Errorf("sandbox list after the refusals: %q %v", out, err)
	}
}

// TestSandboxSecretsAtStart: what a supervisor resolves at each start:
// the vault's values, and the CA kept in the sandbox's directory (made
// once, 0600, the same at the next start, name-constrained to the bound
// hosts); a key deleted since is an error naming it; a CA file open to
// others or damaged is refused with the fix, and replaced when removed.
func TestSandboxSecretsAtStart(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "sandboxes", "box")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v, err := secrets.Open(secrets.Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Set("GH", []byte("vault-value-1234")); err != nil {
		t.Fatal(err)
	}
	spec := &sandbox.Spec{Name: "box", SecretBindings: &sandbox.SecretBindings{Bindings: []sandbox.SecretRef{{Key: "GH", Host: "api.github.test", Header: "x-api-key"}}}}

	s, err := sandboxSecrets(data, dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Bindings) != 1 || string(s.Bindings[0].Value) != "vault-value-1234" || s.Bindings[0].Header != "x-api-key" {
		t.Errorf("bindings: %+v", s.Bindings)
	}
	caPath := filepath.Join(dir, sandbox.SecretCAFile)
	fi, err := os.Stat(caPath)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA file: %v %v", fi, err)
	}
	blk, _ := pem.Decode(s.CACert)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil || !cert.IsCA || len(cert.PermittedDNSDomains) != 1 || cert.PermittedDNSDomains[0] != "api.github.test" {
		t.Errorf("CA: %v %+v", err, cert)
	}
	if b, _ := os.ReadFile(caPath); strings.Contains(string(b), "vault-value") {
		t.Error("the CA file holds the value")
	}
	again, err := sandboxSecrets(data, dir, spec)
	if err != nil || string(again.CACert) != string(s.CACert) || string(again.CAKey) != string(s.CAKey) {
		t.Errorf("the next start has another CA (%v)", err)
	}

	// A binding to a host the kept CA does not cover: a new CA.
	wider := &sandbox.Spec{Name: "box", SecretBindings: &sandbox.SecretBindings{Bindings: append(spec.SecretBindings.Bindings, sandbox.SecretRef{Key: "GH", Host: "other.test"})}}
	if w, err := sandboxSecrets(data, dir, wider); err != nil || string(w.CACert) == string(s.CACert) {
		t.Errorf("a CA that does not cover other.test was kept (%v)", err)
	}

	if err := os.Chmod(caPath, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxSecrets(data, dir, spec); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a CA file open to others: %v", err)
	}
	if err := os.WriteFile(caPath, []byte("not a CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(caPath, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxSecrets(data, dir, spec); err == nil || !strings.Contains(err.Error(), "remove the file") {
		t.Errorf("a damaged CA file: %v", err)
	}
	os.Remove(caPath)
	if _, err := sandboxSecrets(data, dir, spec); err != nil {
		t.Errorf("after the damaged CA was removed: %v", err)
	}

	if err := v.Delete("GH"); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxSecrets(data, dir, spec); err == nil || !strings.Contains(err.Error(), "secret 'GH'") || !strings.Contains(err.Error(), "not in the vault") {
		t.Errorf("a deleted key: %v", err)
	}
	if s, err := sandboxSecrets(data, dir, &sandbox.Spec{Name: "plain"}); s != nil || err != nil {
		t.Errorf("a sandbox without bindings: %+v %v", s, err)
	}
}
