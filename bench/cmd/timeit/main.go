// Command timeit times shell commands side by side and prints a Markdown
// table of medians, p90s and ratios against the first command.
//
//	go run ./bench/cmd/timeit -n 50 'bwrap=bwrap --unshare-all --ro-bind / / true' 'agentkernel=./agentkernel run --image host -- true'
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/agentkernel/agentkernel/bench/harness"
)

func main() {
	n := flag.Int("n", 30, "timed runs per command")
	warm := flag.Int("warmup", 3, "untimed runs per command first")
	settle := flag.Duration("settle", 0, "pause after every run, so that work a command leaves to the kernel or to a process of its own after it exits (a network namespace's cleanup, a sandbox's unmounting) does not land in the next run's time")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: timeit [-n N] [-warmup N] 'name=command line' ...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var cases []harness.Case
	for _, a := range flag.Args() {
		name, cmd, ok := strings.Cut(a, "=")
		if !ok || strings.ContainsAny(name, " \t") {
			name, cmd = a, a
		}
		argv := strings.Fields(cmd)
		if strings.ContainsAny(cmd, "|&;<>()$`\\\"'*?") {
			argv = []string{"sh", "-c", cmd} // needs a shell; costs the same for every case that does
		}
		cases = append(cases, harness.Case{Name: name, Argv: argv, Settle: *settle})
	}
	stats := harness.Run(context.Background(), cases, harness.Options{Runs: *n, Warmup: *warm, Interleave: true})
	harness.Report(os.Stdout, stats)
}
