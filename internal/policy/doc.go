// Package policy turns a security profile, an agent compatibility mode,
// the loaded configuration and the run flags into one fully resolved
// sandbox.Spec. It owns the profile and mode tables and the parsing of
// the flags that describe a sandbox (-v, -e, --env-file, --memory, ...).
//
// Resolve is a plain function that produces plain data and touches the
// host only to read: it checks that -v host paths exist and reads
// --env-file files and host environment variables. It applies the same
// semantics whatever backend later runs the Spec.
//
// The layers, each overriding the one before:
//
//  1. the profile row (--profile, else [security].profile when a file
//     sets it, else the mode's base profile: restrictive for codex,
//     moderate otherwise);
//  2. the mode: claude, codex and gemini mount the project read-write at
//     /workspace, turn the network on, add their API domains and pass
//     their API key variable; every mode blocks the cloud metadata
//     endpoints;
//  3. the [security] and [resources] values a configuration file sets;
//  4. flags (--no-network always wins).
package policy
