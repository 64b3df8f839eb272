//go:build linux

// Probe write_lower_layer tries to change the image's read-only layer
// directories: by writing a file of the image (copy-up into the sandbox's
// own layer is fine), and by writing straight to the lowerdir paths that
// /proc/self/mountinfo reveals and to the layer path the test passes. Only
// a write that lands in a layer directory counts; the test also hashes the
// layer directories on the host before and after the whole battery.
package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkernel/agentkernel/test/attack/probes/internal/probe"
)

const name = "write_lower_layer"

func main() { probe.Run(name, attack, control) }

func attack() {
	var notes []string
	if err := os.WriteFile("/etc/attack-lower", []byte("changed in sandbox\n"), 0o644); err == nil {
		notes = append(notes, "copy-up of /etc/attack-lower ok")
	} else {
		notes = append(notes, "copy-up: "+err.Error())
	}
	var dirs []string
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			for _, opt := range strings.Split(line, ",") {
				opt = strings.TrimSpace(opt)
				if i := strings.Index(opt, "lowerdir="); i >= 0 {
					for _, d := range strings.Split(opt[i+len("lowerdir="):], ":") {
						dirs = append(dirs, strings.Fields(d)[0])
					}
				}
			}
		}
	}
	if d := os.Getenv("ATTACK_LAYER_DIR"); d != "" {
		dirs = append(dirs, d, "/proc/1/root"+d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, "etc", "attack-lower")
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			notes = append(notes, p+": "+err.Error())
			continue
		}
		_, err = f.WriteString("changed through lowerdir\n")
		f.Close()
		if err == nil {
			report("allowed", "wrote layer file "+p)
		}
	}
	report("blocked", strings.Join(notes, "; "))
}

// control: outside a sandbox the image's lower layer file opens for
// writing at the path the test passes (nothing is written or truncated:
// the host check hashes the layers).
func control() {
	p := filepath.Join(os.Getenv("ATTACK_LAYER_DIR"), "etc", "attack-lower")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		report(probe.Unreachable, p+": "+err.Error())
	}
	f.Close()
	report(probe.Reachable, "the layer's file opens for writing outside a sandbox (nothing written)")
}

func report(result, detail string) { probe.Report(name, result, detail) }
