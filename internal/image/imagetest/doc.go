// Package imagetest supports tests that need OCI images: an in-process
// registry (go-containerregistry's pkg/registry behind httptest, on
// 127.0.0.1, optionally with basic auth or throttled blobs), builders for
// layers and images from in-memory files, directories or random content,
// multi-arch indexes, and a busybox userland image built from the host's
// /bin/busybox (Debian package busybox-static).
//
// It is for tests only: everything takes a testing.TB and fails the test
// on error.
package imagetest
