package config

import (
	"fmt"
	"strings"
)

// Cache is [cache]: persistent caches of package managers and build
// tools, kept under the data directory and shared by every sandbox that
// names them (run --cache).
type Cache struct {
	// Tools are the caches to mount: go, pip, npm, cargo.
	Tools []string `toml:"tools"`
}

// CacheTools are the caches run --cache and [cache] tools know, in the
// order help lists them.
var CacheTools = []string{"go", "pip", "npm", "cargo"}

// ValidateCacheTool checks one cache name.
func ValidateCacheTool(t string) error {
	for _, k := range CacheTools {
		if t == k {
			return nil
		}
	}
	return fmt.Errorf("unknown cache %q: use %s", t, strings.Join(CacheTools, ", "))
}
