package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes through the file reader, the TOML
// parser, the schema walk and validation. It must never panic, and every
// failure must be a *Error that names the file.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("[sandbox]\nname = \"x\"\n[resources]\ntimeout = \"5m\"\n"))
	f.Add([]byte("[[files]]\nsource = \"a\"\ndest = \"/a\"\n[[files]]\nx = 1\n"))
	f.Add([]byte("a.b.c.d = 1\n[security.domains]\nallow = [1, \"x\"]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, warns, err := Parse(data, "fuzz.toml")
		check := func(c *Config, warns []Warning, err error) {
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Path == "" {
					t.Fatalf("error without a location: %v", err)
				}
				if c != nil {
					t.Fatal("a config returned with an error")
				}
				return
			}
			if c == nil {
				t.Fatal("nil config without an error")
			}
			if len(warns) > maxUnknownWarnings+1 {
				t.Fatalf("%d warnings", len(warns))
			}
			_ = c.Values()
		}
		check(c, warns, err)

		path := filepath.Join(t.TempDir(), FileName)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c2, warns2, err2 := Load(LoadOptions{Path: path, NoUserFile: true})
		check(c2, warns2, err2)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("Parse and Load disagree: %v vs %v", err, err2)
		}
	})
}
