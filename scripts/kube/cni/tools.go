//go:build tools

// Package tools names the CNI plugins scripts/kube.sh builds for the
// kubernetes backend's test node (bridge, host-local, loopback), so that
// `go mod tidy` keeps their module in go.mod. It is a module of its own:
// the plugins' dependencies do not move those of the Kubernetes build
// in scripts/kube.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
