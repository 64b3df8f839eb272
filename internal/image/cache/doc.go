// Package cache reads agentkernel's image store without any registry
// code: the store's format (store.json, index.json, the layer
// directories), the [Rootfs] it hands to backends, and [Lookup], which
// finds a cached image's root filesystem.
//
// It exists so that the processes that only run cached images (every
// `agentkernel run` of an image that is already pulled) do not link the
// registry client, its decompressors and TLS stack: a Go program runs the
// init of every package it links, on every start. Package image, which
// pulls, loads, lists and prunes, builds on this one and writes what it
// reads; its [image.Store.Ensure] looks images up through the same
// [Snapshot] code.
//
// [Normalize] turns everyday references into the index's keys by
// docker's grammar. It answers false for any form it is not sure of; the
// caller then asks the full store, whose parser is go-containerregistry's.
// A fuzz test in package image holds the two to the same answers.
package cache
