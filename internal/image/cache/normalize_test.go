package cache

import (
	"strings"
	"testing"
)

// TestNormalize: everyday references get their index keys without a
// registry client (so that 'agentkernel run' finds them), and forms the
// fast path is not sure of are declined rather than guessed. Package
// image's FuzzNormalizeRef holds every answer to go-containerregistry's.
func TestNormalize(t *testing.T) {
	dg := "sha256:" + strings.Repeat("ab", 32)
	for ref, want := range map[string]string{
		"alpine":                                "index.docker.io/library/alpine:latest",
		"alpine:3.20":                           "index.docker.io/library/alpine:3.20",
		"python:3.12-alpine":                    "index.docker.io/library/python:3.12-alpine",
		"golang:1.23-alpine":                    "index.docker.io/library/golang:1.23-alpine",
		"bench/busybox:1":                       "index.docker.io/bench/busybox:1",
		"docker.io/alpine":                      "index.docker.io/library/alpine:latest",
		"docker.io/library/alpine:3.20":         "index.docker.io/library/alpine:3.20",
		"index.docker.io/library/alpine:latest": "index.docker.io/library/alpine:latest",
		"localhost:5000/team/tool:1":            "localhost:5000/team/tool:1",
		"localhost/x":                           "localhost/x:latest",
		"127.0.0.1:5000/x/y":                    "127.0.0.1:5000/x/y:latest",
		"ghcr.io/owner/repo:v1.2_3-4":           "ghcr.io/owner/repo:v1.2_3-4",
		"alpine@" + dg:                          "index.docker.io/library/alpine@" + dg,
		"ghcr.io/o/r@" + dg:                     "ghcr.io/o/r@" + dg,
	} {
		if got, ok := Normalize(ref); !ok || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", ref, got, ok, want)
		}
	}
	for _, ref := range []string{
		"", "Alpine", "alpine:", ":tag", "a//b", "a:b:c", "/alpine", "alpine@sha256:short", "a b", "\x00",
		"alpine:3.20@" + dg, "[::1]:5000/x:y", "LOCALHOST:5000/x", "a__b", "a--b", "-a", "a-", "x/", "alpine:-x",
		strings.Repeat("a", 300), "alpine:" + strings.Repeat("t", 129), "reg.io:/x", "reg.io:123456/x",
	} {
		if got, ok := Normalize(ref); ok {
			t.Errorf("Normalize(%q) = %q; want it declined", ref, got)
		}
	}
}
