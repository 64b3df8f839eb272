package detect

import (
	"strings"
	"testing"
)

func FuzzParseProcfile(f *testing.F) {
	f.Add([]byte("web: bundle exec rails server -p $PORT\nworker: python w.py\n"))
	f.Add([]byte("web:\n"))
	f.Add([]byte("# comment\n\n:python\nx: \xff\xfe python3"))
	f.Add([]byte(strings.Repeat("a", 70000) + "\nweb: go run ."))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, ok := ParseProcfile(data)
		if !ok {
			return
		}
		// A match must name a command of the table and its image.
		rt, found := CommandRuntime(e.Command)
		if !found || rt.Image != e.Runtime.Image {
			t.Fatalf("match %+v is not in the command table", e)
		}
		if !strings.Contains(string(data), e.Command) {
			t.Fatalf("command %q does not occur in the input", e.Command)
		}
	})
}
