package sandbox

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSpecSecretsNotSerialized: a spec's secrets (values, the CA's key,
// even the names) never reach its JSON form: dry runs, spec.json, the
// daemon's socket and logs all write that form.
func TestSpecSecretsNotSerialized(t *testing.T) {
	s := &Spec{ID: "x", Secrets: &Secrets{
		Bindings: []SecretBinding{{Key: "KEYNAME", Host: "api.example.test", Value: []byte("s3cr3t-value")}, {Key: "OTHER", Host: "b.test", Header: "x-api-key", Value: []byte("v2")}, {Key: "KEYNAME", Host: "c.test", Value: []byte("v3")}},
		CACert:   []byte("-----BEGIN CERTIFICATE-----"),
		CAKey:    []byte("-----BEGIN PRIVATE KEY-----"),
	}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, no := range []string{"s3cr3t", "czNjcjN0", "PRIVATE", "CERTIFICATE", "KEYNAME", "api.example.test"} {
		if strings.Contains(string(b), no) {
			t.Errorf("the spec's JSON holds %q: %s", no, b)
		}
	}
	if got := s.Secrets.Keys(); strings.Join(got, ",") != "KEYNAME,OTHER" {
		t.Errorf("Keys() = %v", got)
	}
	if (*Secrets)(nil).Keys() != nil {
		t.Error("Keys of no secrets")
	}
}
