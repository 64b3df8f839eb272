package cache

import (
	"strings"
	"testing"
)

// TestParseIndex: a record not keyed by its own digest, or null, is
// dropped (damage, never something the store wrote); another format
// version is refused; null tables are empty ones.
func TestParseIndex(t *testing.T) {
	a, b := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	idx, err := ParseIndex([]byte(`{"version": 1, "images": {"` + a + `": {"digest": "` + a + `", "layers": [{"diff_id": "` + b + `"}]},
		"` + b + `": {"digest": "` + a + `"}, "sha256:x": null}, "tags": {"alpine": "` + a + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Images) != 1 || idx.Images[a] == nil || idx.Images[a].Layers[0].DiffID != b || idx.Tags["alpine"] != a {
		t.Fatalf("index %+v", idx)
	}
	for _, bad := range []string{`{"version": 2, "images": {}}`, `[]`, `{"version": 1, "images": []}`} {
		if _, err := ParseIndex([]byte(bad)); err == nil {
			t.Errorf("ParseIndex(%s) accepted", bad)
		}
	}
	idx, err = ParseIndex([]byte(`{"version": 1, "images": null, "tags": null}`))
	if err != nil || idx.Images == nil || idx.Tags == nil {
		t.Fatalf("null tables: %+v, %v", idx, err)
	}
}
