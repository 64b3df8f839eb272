package stub

import (
	"os"
	"testing"
)

// TestBinaryIsTheAssembledStub: the constant the binary carries is
// execstub_amd64.bin byte for byte (scripts/test.sh checks that the .bin
// is the assembled execstub_amd64.S); go generate rewrites both.
func TestBinaryIsTheAssembledStub(t *testing.T) {
	b, err := os.ReadFile("execstub_amd64.bin")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != Binary {
		t.Fatal("execstub_bin_linux_amd64.go is stale: go generate ./internal/backend/native/stub")
	}
}
