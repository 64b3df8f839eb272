package engine

import (
	"regexp"
	"strings"
	"testing"
)

// TestValidID: validID accepts exactly the ids the name pattern
// ^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$ accepts.
func TestValidID(t *testing.T) {
	re := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$`)
	ids := []string{
		"", "a", "Z", "0", "-", "_", ".", "a-b_c.d", "-a", ".a", "_a", "a/b", "a b", "a\n", "\na",
		"a\x00", "é", "aé", "a:b", "..", "box-1", "pool-0123456789abcdef",
		strings.Repeat("a", 100), strings.Repeat("a", 101), strings.Repeat("a", 102),
		"a" + strings.Repeat("-", 100), "a" + strings.Repeat("-", 101),
	}
	for c := 0; c < 256; c++ {
		ids = append(ids, string(rune(c)), "a"+string([]byte{byte(c)}), string([]byte{byte(c)})+"a")
	}
	for _, id := range ids {
		if got, want := validID(id), re.MatchString(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
}
