package secrets

import (
	"errors"
	"strings"
	"testing"
)

// TestEnvBackend: env reads host variables by name and refuses to store
// or delete, in the spec's words; it lists nothing.
func TestEnvBackend(t *testing.T) {
	v, err := Open(Options{Backend: BackendEnv, LookupEnv: func(k string) (string, bool) {
		switch k {
		case "GITHUB_TOKEN":
			return "ghp_x\ny", true
		case "EMPTY":
			return "", true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.Get("GITHUB_TOKEN"); err != nil || string(got) != "ghp_x\ny" {
		t.Errorf("Get = %q, %v", got, err)
	}
	for _, k := range []string{"MISSING", "EMPTY"} {
		if _, err := v.Get(k); !errors.Is(err, ErrNotFound) || err.Error() != "Secret '"+k+"' not found" {
			t.Errorf("Get(%s): %v", k, err)
		}
	}
	if _, err := v.Get("A=B"); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("Get of a bad name: %v", err)
	}
	if err := v.Set("K", []byte("v")); !errors.Is(err, ErrReadOnly) || !strings.HasPrefix(err.Error(), "Cannot set secrets with 'env' backend") {
		t.Errorf("Set: %v", err)
	}
	if err := v.Delete("GITHUB_TOKEN"); !errors.Is(err, ErrReadOnly) || !strings.HasPrefix(err.Error(), "Cannot delete secrets with 'env' backend") {
		t.Errorf("Delete: %v", err)
	}
	if names, err := v.List(); err != nil || names == nil || len(names) != 0 {
		t.Errorf("List = %#v, %v; want empty", names, err)
	}
	if v.Backend() != BackendEnv {
		t.Errorf("Backend = %q", v.Backend())
	}
}

// TestOpenBackends: keyring and unknown backends are clear errors; the
// file backend needs a data directory.
func TestOpenBackends(t *testing.T) {
	_, err := Open(Options{Backend: BackendKeyring, DataDir: t.TempDir()})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "'keyring' secrets backend is not supported") {
		t.Errorf("keyring: %v", err)
	}
	if _, err := Open(Options{Backend: "vault9"}); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `"vault9"`) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := Open(Options{}); err == nil {
		t.Error("file backend without a data directory opened")
	}
	for _, b := range []string{"", BackendFile} {
		v, err := Open(Options{Backend: b, DataDir: t.TempDir()})
		if err != nil || v.Backend() != BackendFile {
			t.Errorf("backend %q: %v", b, err)
		}
	}
}
