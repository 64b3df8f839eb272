// Package detect chooses the OCI image for a command when the user did not
// name one. It owns the detection tables (command basename, project files,
// runtime shorthand) as plain data that matches upstream agentkernel, the
// Procfile reader, and the precedence between them:
//
//	--image > config base_image / runtime > command > project files > Procfile > alpine:3.20
//
// One deliberate difference from upstream: a shell (sh, bash, zsh, ash) is
// a wrapper, not a toolchain, so 'bash -c "npm test"' in a Node project
// gets node:22-alpine. When argv[0] is a shell, project files and the
// Procfile are consulted first, and the Shell row (alpine:3.20, rule
// "command") applies only when they find nothing.
//
// Detection only reads the working directory's entry names and its
// Procfile (at most MaxProcfileSize bytes); it never executes anything.
package detect
