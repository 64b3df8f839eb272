// Package nomad is the nomad backend: a sandbox is a Nomad job
// (agentkernel-<name>, type batch, one group, one task "sandbox"), made
// through the API with github.com/hashicorp/nomad/api (MPL-2.0; Nomad
// itself is not open source and is never linked: the tests run an agent
// built by scripts/nomad.sh).
//
// # Drivers
//
// The default driver, "agentkernel", is a raw_exec task running the
// node's agentkernel: `sandbox create NAME --start` with the request's
// profile, image, network mode, allowed domains and memory as flags,
// then it stays in the foreground while the sandbox runs, so that the
// task lives exactly as long as the sandbox, and removes the sandbox
// when the task ends. Isolation is the native backend's on the node;
// raw_exec itself isolates nothing, so plain raw_exec is refused as a
// driver. "exec" uses Nomad's own exec driver instead (Nomad's chroot,
// namespaces and cgroups; network none is the group's network mode
// "none"; no filtered network, no images).
//
// A job registers with EnforceIndex and index 0, which fails when a job
// of that ID exists: that claims the name. Every job carries
// agentkernel.managed-by=agentkernel in its meta with the sandbox's
// name, profile, network, driver, labels and expiry; List, Get, Remove
// and Reap never touch a job without it. Names and every field that
// reaches a job spec or a command line are checked before any request
// (ValidName, Request.Check); the node's shell script takes them as
// positional parameters and environment, never as code.
//
// # Exec and files
//
// Exec uses Nomad's allocation exec API (a websocket through the agent
// to the client node): it needs no port, address or credentials on the
// node beyond Nomad's own, and Nomad's ACLs (alloc-exec) govern it. With
// the agentkernel driver the command is `agentkernel exec -i NAME --
// CMD` inside the task, so it runs in the native sandbox, not in
// raw_exec's unisolated task. WriteFile and ReadFile are execs of cat
// with the path as an argument.
//
// # Cost of the client
//
// github.com/hashicorp/nomad/api is small: measured on the shared
// 2-core test machine (GODEBUG=inittrace=1, 11 runs), a program that
// only imports it initialises its packages in 0.94 ms median (0.19 ms
// without), 59 KB allocated, and grows by 3.6 MB, most of it net/http
// and crypto/tls, which agentkernel-full links already. Unlike
// client-go it fits in agentkernel-full.
package nomad
