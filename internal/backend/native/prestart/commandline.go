package prestart

import "syscall"

// This file reads a run's command line at package init, before pflag and
// the packages it imports have initialised, and with nothing but syscall
// imported, so that this package initialises right after the stub and the
// sandbox thread starts that early (importing pflag would put fmt, os,
// strconv, net and the rest first). What it knows of the flags is
// commandline_table.go, generated from runcli's bindings
// (TestRunFlagsKnownToPrestart fails when the two differ); IsRun is also
// runcli.ParseRun's answer to whether a command line is a run.

//go:generate go test ../../../cli/runcli -run ^TestRunFlagsKnownToPrestart$ -count=1 -update

// IsRun reports whether args (argv, program name first) is
// agentkernel [global flags] run …: its first argument that is neither a
// flag nor a global flag's value is "run".
func IsRun(args []string) bool {
	_, ok := parseRun(args)
	return ok
}

// runLine is what prestart reads of a run's command line: the same
// command line runcli.ParseRun parses later.
type runLine struct {
	dataDir string
	// noDaemon: a flag that keeps the run from a daemon (--no-daemon,
	// --fast=false, --secret, --dry-run, -t, --interactive, --keep,
	// another backend).
	noDaemon bool
	// otherBackend: -B names a backend other than native.
	otherBackend bool
}

// parseRun reads args as agentkernel [global flags] run [flags] [--]
// COMMAND...: ok is false when it is not a run. Flags end at the first
// argument that is not one (run's flags are not interspersed).
func parseRun(args []string) (r runLine, ok bool) {
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			if ok {
				break // the command
			}
			if a != "run" {
				return r, false
			}
			ok = true
			continue
		}
		name, val, hasVal := "", "", false
		if a[1] == '-' {
			name = a[2:]
			for j := 0; j < len(name); j++ {
				if name[j] == '=' {
					name, val, hasVal = name[:j], name[j+1:], true
					break
				}
			}
		} else {
			// -tk, -i alpine, -ialpine, -i=alpine
			for k := 1; k < len(a); k++ {
				n := FlagForShorthand(a[k])
				if FlagTakesValue(n) {
					name = n
					if k+1 < len(a) {
						val, hasVal = a[k+1:], true
						if val[0] == '=' {
							val = val[1:]
						}
					}
					break
				}
				if k+1 < len(a) && a[k+1] == '=' {
					r.set(n, a[k+2:]) // -F=false, as pflag reads it
					break
				}
				r.set(n, "true")
			}
			if name == "" {
				continue
			}
		}
		if FlagTakesValue(name) && !hasVal {
			i++
			if i < len(args) {
				val = args[i]
			}
		} else if !hasVal {
			val = "true"
		}
		r.set(name, val)
	}
	return r, ok
}

func (r *runLine) set(name, val string) {
	switch name {
	case flagDataDir:
		r.dataDir = val
	case flagBackend:
		if val != "" && !equalFold(val, "native") {
			r.noDaemon, r.otherBackend = true, true
		}
	case flagNoDaemon, flagDryRun, flagTty, flagInteractive, flagKeep:
		if !isFalse(val) {
			r.noDaemon = true
		}
	case flagFast:
		// --fast=false is --no-daemon.
		if isFalse(val) {
			r.noDaemon = true
		}
	case flagSecret:
		r.noDaemon = true // a run with secrets builds its sandbox here
	}
}

// isFalse is whether a boolean flag's value is one of strconv.ParseBool's
// false spellings.
func isFalse(val string) bool {
	return val == "false" || val == "0" || val == "f" || val == "F" || val == "FALSE" || val == "False"
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// DefaultDataDir is $XDG_DATA_HOME/agentkernel, else
// $HOME/.local/share/agentkernel, else $TMPDIR (or /tmp)/agentkernel-UID.
func DefaultDataDir() string {
	if x, _ := syscall.Getenv("XDG_DATA_HOME"); x != "" && x[0] == '/' {
		return x + "/agentkernel"
	}
	if h, _ := syscall.Getenv("HOME"); h != "" {
		return h + "/.local/share/agentkernel"
	}
	tmp, _ := syscall.Getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return tmp + "/agentkernel-" + itoa(syscall.Getuid())
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// otherBackend reports whether command line args is a run on a backend
// other than native (-B): that backend builds its sandbox its own way,
// so a thread made here would only take a core from its start-up.
func otherBackend(args []string) bool {
	r, ok := parseRun(args)
	return ok && r.otherBackend
}

// daemonServes guesses whether a running agentkernel daemon will serve
// the run on command line args: the daemon's run socket exists in the
// run's data directory and no flag keeps the run from it. The daemon
// builds such a run's sandbox, so making a thread for it here would only
// take a core from start-up. A wrong guess costs time, never
// correctness: a run the daemon does not serve makes its thread itself.
func daemonServes(args []string) bool {
	r, ok := parseRun(args)
	if !ok || r.noDaemon {
		return false
	}
	if v, ok := syscall.Getenv("AGENTKERNEL_NO_DAEMON"); ok && v != "" && v != "0" {
		return false
	}
	dir := r.dataDir
	if dir == "" {
		dir = DefaultDataDir()
	}
	var st syscall.Stat_t
	return syscall.Stat(dir+"/daemon/run.sock", &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK
}
