// Package apispec holds the OpenAPI 3.1 document of the HTTP API
// (openapi.yaml beside this file), embedded so that `agentkernel serve`
// can serve it at GET /openapi.yaml.
package apispec

import _ "embed"

// OpenAPI is api/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
