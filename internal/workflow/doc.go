// Package workflow runs several sandboxed commands as one: 'parallel'
// (jobs at once, within a concurrency limit, with a status line per job)
// and 'pipeline' (steps in order from a TOML file, each step's output
// files handed to the next step's input directory).
//
// The package knows nothing of sandboxes: each job or step is a Runner
// the command line made (cli/workflow.go: a run's spec resolved as 'run'
// resolves it, its image ensured before anything starts, then
// sandbox.Manager.Run). Pipelines hand files through host directories:
// each step is an ephemeral run with a fresh host directory bound at its
// output path and, for its input path, another holding the regular files
// the previous step left in its output. This keeps a step to one
// sandbox.Manager call, with nothing persistent to create, start, stop or
// remove (nothing left behind by a pipeline that is interrupted), where a
// persistent sandbox per step would need its own file copies in and out
// through the sandbox's agent. What users see is upstream's: the order,
// the progress lines, the messages and that only regular files, not
// directories, pass from one step to the next. The files are copied
// without following links (a step's output is hostile input), and every
// directory is removed at the end, on failure too.
package workflow
