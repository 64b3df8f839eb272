//go:build tools

// Package tools names the programs scripts/kube.sh builds, so that
// `go mod tidy` keeps their modules in go.mod.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
