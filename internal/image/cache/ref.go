package cache

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNotFound is returned (wrapped) when an image is neither cached nor,
// where the pull policy allows asking, known to its registry.
var ErrNotFound = errors.New("image not found")

// ErrUnreachable is returned (wrapped) when an image is not cached and its
// registry cannot be reached: DNS failure, connection refused, no route,
// timeout. The run command falls back to the host image on it for images
// it chose itself.
var ErrUnreachable = errors.New("registry unreachable")

// PullPolicy says when Ensure contacts the registry.
type PullPolicy string

const (
	// PullMissing pulls only images that are not cached (the default).
	PullMissing PullPolicy = "missing"
	// PullAlways asks the registry every time and pulls what changed.
	PullAlways PullPolicy = "always"
	// PullNever uses the cache only and fails with ErrNotFound on a miss.
	PullNever PullPolicy = "never"
)

// ParsePullPolicy parses "missing", "always" or "never" ("" means
// missing).
func ParsePullPolicy(s string) (PullPolicy, error) {
	switch p := PullPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return PullMissing, nil
	case PullMissing, PullAlways, PullNever:
		return p, nil
	}
	return "", fmt.Errorf("pull policy %q: use missing, always or never", s)
}

// HostRef is the reference of the special image that is the host's own
// read-only root filesystem.
const HostRef = "host"

// IsHost reports whether ref names the special host image ("host" or
// "host:latest").
func IsHost(ref string) bool { return ref == HostRef || ref == "host:latest" }

// HostPath is the PATH of the host image's config, and of root
// filesystems imported from a plain tarball.
const HostPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// HostRootfs is the Rootfs of the host image. It does no I/O.
func HostRootfs() Rootfs {
	return Rootfs{
		Ref:  HostRef,
		Host: true,
		Config: Config{
			Env:        []string{HostPath},
			Cmd:        []string{"/bin/sh"},
			WorkingDir: "/",
		},
	}
}

// IsDigestRef reports whether ref is a bare digest ("sha256:…", full or a
// prefix of at least 12 hex digits) naming a cached image.
func IsDigestRef(ref string) bool {
	hex, ok := strings.CutPrefix(ref, "sha256:")
	return ok && len(hex) >= 12 && len(hex) <= 64 && isLowerHex(hex)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// defaultRegistry is Docker Hub's name in normalised references.
const defaultRegistry = "index.docker.io"

// Normalize is the canonical form of an everyday image reference, the key
// the index files it under, without a registry client: Docker Hub short
// names get their registry and "library/" ("alpine:3.20" →
// "index.docker.io/library/alpine:3.20") and a missing tag becomes
// "latest". It accepts only references whose form is unambiguous (docker's
// grammar, lowercase registry, no tag together with a digest) and answers
// false for anything else, which the image store's full parser then
// handles: a false here is never an error, only "ask the store".
func Normalize(ref string) (string, bool) {
	if ref == "" || len(ref) > 255 {
		return "", false
	}
	name, digest, hasDigest := strings.Cut(ref, "@")
	if hasDigest {
		hex, ok := strings.CutPrefix(digest, "sha256:")
		if !ok || len(hex) != 64 || !isLowerHex(hex) {
			return "", false
		}
	}
	tag := ""
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name, tag = name[:i], name[i+1:]
		if hasDigest || !validTag(tag) {
			return "", false
		}
	}
	registry, repo := defaultRegistry, name
	if first, rest, ok := strings.Cut(name, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		if !validRegistry(first) {
			return "", false
		}
		registry, repo = first, rest
		if registry == "docker.io" {
			registry = defaultRegistry
		}
	}
	if registry == defaultRegistry && !strings.Contains(repo, "/") {
		repo = "library/" + repo
	}
	if len(repo) > 255 || !validRepo(repo) {
		return "", false
	}
	switch {
	case hasDigest:
		return registry + "/" + repo + "@" + digest, true
	case tag == "":
		tag = "latest"
	}
	return registry + "/" + repo + ":" + tag, true
}

// validTag: 1 to 128 of [A-Za-z0-9_.-], not starting with '.' or '-'.
func validTag(t string) bool {
	if t == "" || len(t) > 128 || t[0] == '.' || t[0] == '-' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; !(isAlnum(c) || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// validRepo: path components of lowercase letters and digits, joined
// within a component by single '.', '_' or '-'.
func validRepo(r string) bool {
	for _, comp := range strings.Split(r, "/") {
		if comp == "" {
			return false
		}
		sep := true // a component starts, and may not start with a separator
		for i := 0; i < len(comp); i++ {
			c := comp[i]
			switch {
			case 'a' <= c && c <= 'z' || '0' <= c && c <= '9':
				sep = false
			case (c == '.' || c == '_' || c == '-') && !sep:
				sep = true
			default:
				return false
			}
		}
		if sep {
			return false
		}
	}
	return true
}

// validRegistry: a lowercase host name (or "localhost") with an optional
// numeric port.
func validRegistry(r string) bool {
	host, port, hasPort := strings.Cut(r, ":")
	if host == "" || len(r) > 255 {
		return false
	}
	if hasPort {
		if port == "" || len(port) > 5 {
			return false
		}
		for i := 0; i < len(port); i++ {
			if port[i] < '0' || port[i] > '9' {
				return false
			}
		}
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}
