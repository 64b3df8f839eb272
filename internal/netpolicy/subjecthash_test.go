package netpolicy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSubjectHash: SubjectHash names a certificate as OpenSSL's own
// `x509 -subject_hash` does, for the sandbox's CA and for subjects that
// exercise the canonical form: case, white space inside and around,
// several attributes, a multi-valued relative name (its SET reordered),
// non-ASCII text, and BMP, T61 and IA5 strings.
func TestSubjectHash(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	oid := func(ns ...int) asn1.ObjectIdentifier { return asn1.ObjectIdentifier(ns) }
	cn, o, ou, c, email := oid(2, 5, 4, 3), oid(2, 5, 4, 10), oid(2, 5, 4, 11), oid(2, 5, 4, 6), oid(1, 2, 840, 113549, 1, 9, 1)
	bmp := func(s string) asn1.RawValue {
		var b []byte
		for _, r := range s {
			b = append(b, byte(r>>8), byte(r))
		}
		return asn1.RawValue{Tag: asn1.TagBMPString, Bytes: b}
	}
	ca, _, err := NewCA("run", "api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	subjects := map[string][]byte{"sandbox CA": ca.Leaf.RawSubject}
	for name, rdns := range map[string]pkix.RDNSequence{
		"case and spaces": {{{Type: cn, Value: "  My   Big\tCA  Name  "}}},
		"several":         {{{Type: c, Value: "DE"}}, {{Type: o, Value: "Example  GmbH"}}, {{Type: ou, Value: "Unit"}}, {{Type: cn, Value: "Root CA 1"}}},
		"multi-valued":    {{{Type: ou, Value: "ZZZZZZZZ"}, {Type: cn, Value: "A    B    C    D"}}},
		"non-ASCII":       {{{Type: cn, Value: "Été  ÇA Ünïcode"}}},
		"BMP":             {{{Type: cn, Value: bmp("Bmp  NAME ü")}}},
		"T61":             {{{Type: cn, Value: asn1.RawValue{Tag: asn1.TagT61String, Bytes: []byte("T61 \xe9 NAME")}}}},
		"IA5":             {{{Type: email, Value: asn1.RawValue{Tag: asn1.TagIA5String, Bytes: []byte("Root@Example.TEST")}}}},
	} {
		raw, err := asn1.Marshal(rdns)
		if err != nil {
			t.Fatal(err)
		}
		subjects[name] = raw
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, raw := range subjects {
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), RawSubject: raw, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		cmd := exec.Command("openssl", "x509", "-noout", "-subject_hash")
		cmd.Stdin = strings.NewReader(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: openssl: %v", name, err)
		}
		h, err := SubjectHash(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, want := fmt.Sprintf("%08x", h), strings.TrimSpace(string(out)); got != want {
			t.Errorf("%s: SubjectHash %s, openssl %s", name, got, want)
		}
	}
	if _, err := SubjectHash([]byte{0x30, 0x03, 0x02, 0x01}); err == nil {
		t.Error("a damaged name hashed")
	}
}
