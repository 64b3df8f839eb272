//go:build tools

// Package tools pins the Nomad agent built by scripts/nomad.sh.
package tools

import _ "github.com/hashicorp/nomad"
