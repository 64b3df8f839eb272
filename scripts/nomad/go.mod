// Tools module for the nomad backend's tests: builds a Nomad agent
// (v1.11.2) to run `nomad agent -dev` on loopback. It is its own module, so
// the agentkernel module's `go build ./...` never sees it. Nomad is under
// the BUSL licence: the binary is built for tests only and never shipped,
// vendored or linked into agentkernel.
//
// Nomad's own go.mod replaces github.com/hashicorp/nomad/api by ./api and
// two forks (go-winio, hcl); replace directives of a dependency do not
// apply here, so they are repeated below.
module github.com/agentkernel/agentkernel/scripts/nomad

go 1.26.0

require github.com/hashicorp/nomad v1.11.2

replace (
	github.com/Microsoft/go-winio => github.com/endocrimes/go-winio v0.4.13-0.20190628114223-fb47a8b41948
	github.com/hashicorp/hcl => github.com/hashicorp/hcl v1.0.1-nomad-1
)
