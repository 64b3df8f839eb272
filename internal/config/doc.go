// Package config owns agentkernel.toml: its schema, its defaults, loading
// the layered files (defaults < user file < project file) with the source
// of every value, strict validation with file:line messages, unknown-key
// warnings, and the commented template that 'agentkernel init' writes.
//
// It knows the names of profiles and agent modes (so that a bad name in a
// file is an error at its line) but not what they mean: package policy
// turns a Config plus flags into a sandbox.Spec. Package detect owns the
// runtime shorthand table that [sandbox].runtime is checked against.
//
// Values that are unset in every file keep their zero value, which means
// "the profile decides" for the [security] switches and [resources]
// limits; Config.IsSet tells the two apart where zero is meaningful.
package config
