package image

import (
	"fmt"
	"net"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/agentkernel/agentkernel/internal/image/cache"
)

// The vocabulary shared with the runs that only read the cache lives in
// package cache; these names keep the store's API whole.
var (
	ErrNotFound    = cache.ErrNotFound
	ErrUnreachable = cache.ErrUnreachable
)

type (
	// Rootfs is what the store hands to a backend (cache.Rootfs).
	Rootfs = cache.Rootfs
	// Config is the runtime part of an image config (cache.Config).
	Config = cache.Config
	// IDMap is the ownership shift of unpacked layers (cache.IDMap).
	IDMap = cache.IDMap
	// PullPolicy says when Ensure contacts the registry (cache.PullPolicy).
	PullPolicy = cache.PullPolicy
)

const (
	PullMissing = cache.PullMissing
	PullAlways  = cache.PullAlways
	PullNever   = cache.PullNever
	HostRef     = cache.HostRef
)

// ParsePullPolicy parses "missing", "always" or "never" ("" means
// missing).
func ParsePullPolicy(s string) (PullPolicy, error) { return cache.ParsePullPolicy(s) }

// IsHost reports whether ref names the special host image ("host" or
// "host:latest").
func IsHost(ref string) bool { return cache.IsHost(ref) }

// HostRootfs is the Rootfs of the host image. It does no I/O.
func HostRootfs() Rootfs { return cache.HostRootfs() }

// DefaultIDMap is the map the native backend uses (cache.DefaultIDMap).
func DefaultIDMap() IDMap { return cache.DefaultIDMap() }

// NormalizeRef returns the canonical form of an image reference, the key
// the index files it under: Docker Hub short names get their registry and
// "library/" ("alpine:3.20" -> "index.docker.io/library/alpine:3.20") and
// a missing tag becomes "latest". The host image is returned as "host".
func NormalizeRef(ref string) (string, error) {
	if IsHost(ref) {
		return HostRef, nil
	}
	return normalize(ref)
}

// normalize is NormalizeRef without the host check. Everyday references
// get their key from cache.Normalize, the one normaliser here, which
// 'agentkernel run' uses without a registry client; go-containerregistry
// parses only the forms it declines (a tag together with a digest, an
// IPv6 or upper-case registry). FuzzNormalizeRef holds cache.Normalize
// to go-containerregistry's reading wherever it answers.
func normalize(ref string) (string, error) {
	if n, ok := cache.Normalize(ref); ok {
		return n, nil
	}
	n, err := canonicalName(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	return n, nil
}

// canonicalName is ref's fully qualified name by go-containerregistry. A
// reference whose full name would not parse back is refused: a short name
// can pass the parser's length limit and exceed it once
// "index.docker.io/library/" is added, and such a name could never be
// pulled or looked up again.
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

func isDigestRef(ref string) bool { return cache.IsDigestRef(ref) }
