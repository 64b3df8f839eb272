package image

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
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

// hostPath is the PATH of the host image's config.
const hostPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// HostRootfs is the Rootfs of the host image. It does no I/O.
func HostRootfs() Rootfs {
	return Rootfs{
		Ref:  HostRef,
		Host: true,
		Config: Config{
			Env:        []string{hostPath},
			Cmd:        []string{"/bin/sh"},
			WorkingDir: "/",
		},
	}
}

// NormalizeRef returns the canonical form of an image reference: Docker
// Hub short names get their registry and "library/" ("alpine:3.20" ->
// "index.docker.io/library/alpine:3.20") and a missing tag becomes
// "latest". The host image is returned as "host".
func NormalizeRef(ref string) (string, error) {
	if IsHost(ref) {
		return HostRef, nil
	}
	n, err := canonicalName(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return n, nil
}

// canonicalName is ref's fully qualified name. A reference whose full
// name would not parse back is refused: a short name can pass the
// parser's length limit and exceed it once "index.docker.io/library/" is
// added, and such a name could never be pulled or looked up again.
func canonicalName(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", err
	}
	n := r.Name()
	if s, err := name.ParseReference(n, name.StrictValidation); err != nil || s.Name() != n {
		return "", fmt.Errorf("its full name (%d characters) is not a valid image reference", len(n))
	}
	return n, nil
}

// parseRef parses ref, marking its registry insecure (plain HTTP allowed)
// when it is a loopback registry or listed in insecure.
func parseRef(ref string, insecure []string) (name.Reference, bool, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, false, fmt.Errorf("image reference %q: %w", ref, err)
	}
	reg := r.Context().RegistryStr()
	if !isInsecure(reg, insecure) {
		return r, false, nil
	}
	r, err = name.ParseReference(ref, name.Insecure)
	if err != nil {
		return nil, false, fmt.Errorf("image reference %q: %w", ref, err)
	}
	return r, true, nil
}

// isInsecure reports whether registry (host[:port]) may be spoken to over
// plain HTTP or with unverified TLS: loopback registries always are (as
// with docker), others when listed, with or without the port.
func isInsecure(registry string, insecure []string) bool {
	host := registry
	if h, _, err := net.SplitHostPort(registry); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, s := range insecure {
		s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(s, "http://"), "https://"), "/")
		if s == registry || s == host {
			return true
		}
	}
	return false
}

// isDigestRef reports whether ref is a bare digest ("sha256:…", full or a
// prefix of at least 12 hex digits) naming a cached image.
func isDigestRef(ref string) bool {
	hex, ok := strings.CutPrefix(ref, "sha256:")
	if !ok || len(hex) < 12 || len(hex) > 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// normalizeFast is NormalizeRef without the host check, for lookups.
func normalizeFast(ref string) (string, error) {
	return canonicalName(ref)
}
