//go:build linux

// Command stagetrace shows where one agentkernel run's time goes. It runs
// a command N times with AGENTKERNEL_TRACE_STAGES=1, reads the stage
// lines the native backend then writes to stderr ("<CLOCK_MONOTONIC ms>
// <who>: <stage>"), and prints, per stage, the median time from the fork
// of the command to that stage and the median step from the stage before
// it. The last row is the command's exit as its parent sees it.
//
//	go run ./bench/cmd/stagetrace -n 100 -- bin/agentkernel run --image busybox -- /bin/true
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"golang.org/x/sys/unix"
)

func main() {
	n := flag.Int("n", 50, "runs")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: stagetrace [-n N] -- command [args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	var order []string
	at := map[string][]float64{}   // stage -> offsets from the fork
	step := map[string][]float64{} // stage -> time since the stage before it
	for i := 0; i < *n; i++ {
		var stderr bytes.Buffer
		cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
		cmd.Env = append(os.Environ(), "AGENTKERNEL_TRACE_STAGES=1")
		cmd.Stderr = &stderr
		t0 := now()
		err := cmd.Run()
		end := now()
		if err != nil {
			fmt.Fprintf(os.Stderr, "stagetrace: run %d: %v\n%s", i, err, stderr.String())
			os.Exit(1)
		}
		prev := t0
		seen := map[string]int{}
		add := func(stage string, t float64) {
			seen[stage]++
			if seen[stage] > 1 { // a stage printed twice keeps both, in order
				stage = fmt.Sprintf("%s (%d)", stage, seen[stage])
			}
			if _, ok := at[stage]; !ok {
				order = append(order, stage)
			}
			at[stage] = append(at[stage], t-t0)
			step[stage] = append(step[stage], t-prev)
			prev = t
		}
		sc := bufio.NewScanner(&stderr)
		for sc.Scan() {
			ts, stage, ok := strings.Cut(sc.Text(), " ")
			t, err := strconv.ParseFloat(ts, 64)
			if !ok || err != nil {
				continue
			}
			add(stage, t)
		}
		add("exit seen by the parent", end)
	}
	// Stages not seen in every run sort by their median offset.
	sort.SliceStable(order, func(i, j int) bool { return median(at[order[i]]) < median(at[order[j]]) })
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "stage\tat (ms)\tstep (ms)\truns\t")
	for _, s := range order {
		fmt.Fprintf(w, "%s\t%.2f\t%.2f\t%d\t\n", s, median(at[s]), median(step[s]), len(at[s]))
	}
	w.Flush()
}

func now() float64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return float64(ts.Nano()) / 1e6
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
