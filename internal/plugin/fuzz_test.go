package plugin

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzParseObject: a user's config file can hold anything. parseObject
// never panics; what it accepts is a JSON object whose members come back
// in order, and encodeObject writes valid JSON that parses to the same
// members (so a merge never loses or reorders the user's entries).
func FuzzParseObject(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"mcpServers":{"other":{"command":"x","args":["a"]}}}`,
		`{"a":1,"a":2}`, `[1,2]`, `{"a":1} trailing`, `{"x":"\u00e9\ud83d\ude00"}`, `{"n":1e400}`, "{\"a\":\n  {\"b\": null}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pairs, err := parseObject(data)
		if err != nil {
			return
		}
		if len(bytes.TrimSpace(data)) > 0 && !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		out := encodeObject(pairs, 0)
		if !json.Valid(out) {
			t.Fatalf("encodeObject wrote invalid JSON %q from %q", out, data)
		}
		again, err := parseObject(out)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", out, err)
		}
		if len(again) != len(pairs) {
			t.Fatalf("%d members became %d", len(pairs), len(again))
		}
		for i := range pairs {
			if again[i].key != pairs[i].key {
				t.Fatalf("member %d: key %q became %q", i, pairs[i].key, again[i].key)
			}
			var a, b bytes.Buffer
			if json.Compact(&a, pairs[i].raw) != nil || json.Compact(&b, again[i].raw) != nil || a.String() != b.String() {
				t.Fatalf("member %q: value %s became %s", pairs[i].key, pairs[i].raw, again[i].raw)
			}
		}
	})
}
