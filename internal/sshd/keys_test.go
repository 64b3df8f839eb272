package sshd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestKeysArePrivateAndCertsBounded: Ensure makes the CA and host key
// 0600 in a 0700 directory and keeps them across calls; a client
// certificate names the principal and key id, is a user certificate of
// this CA and expires after the TTL.
func TestKeysArePrivateAndCertsBounded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ssh")
	if err := Ensure(dir, "box"); err != nil {
		t.Fatal(err)
	}
	ca1, err := CASigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Ensure(dir, "box"); err != nil {
		t.Fatal(err)
	}
	ca2, _ := CASigner(dir)
	if string(ca1.PublicKey().Marshal()) != string(ca2.PublicKey().Marshal()) {
		t.Fatal("Ensure replaced an existing CA")
	}
	for _, f := range []string{dir, filepath.Join(dir, caKeyFile), filepath.Join(dir, hostKeyFile)} {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v %v", f, fi.Mode(), err)
		}
	}
	kh, _ := os.ReadFile(KnownHostsPath(dir))
	if !strings.HasPrefix(string(kh), "agentkernel-box ssh-ed25519 ") {
		t.Errorf("known_hosts: %q", kh)
	}
	key := filepath.Join(dir, ClientKey)
	fp, err := IssueClientKey(dir, key, "sandbox", CertTTL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(CertPath(key))
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	cert := pub.(*ssh.Certificate)
	if cert.CertType != ssh.UserCert || cert.KeyId != KeyID || len(cert.ValidPrincipals) != 1 || cert.ValidPrincipals[0] != "sandbox" ||
		string(cert.SignatureKey.Marshal()) != string(ca1.PublicKey().Marshal()) || ssh.FingerprintSHA256(cert) != fp {
		t.Errorf("certificate: %+v", cert)
	}
	if until := time.Until(time.Unix(int64(cert.ValidBefore), 0)); until > CertTTL || until < CertTTL-time.Minute {
		t.Errorf("certificate valid for %v more, want about %v", until, CertTTL)
	}
	// A key file that is a link is refused.
	os.Remove(filepath.Join(dir, caKeyFile))
	os.Symlink(filepath.Join(dir, hostKeyFile), filepath.Join(dir, caKeyFile))
	if _, err := CASigner(dir); err == nil {
		t.Error("a CA key that is a symbolic link was read")
	}
}
