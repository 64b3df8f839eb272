package detect

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Rules name which step of the precedence chose an image (Result.Rule and
// sandbox.Spec.ImageRule).
const (
	RuleFlag     = "flag"     // --image
	RuleConfig   = "config"   // [sandbox].base_image or [sandbox].runtime
	RuleCommand  = "command"  // basename of argv[0]
	RuleProject  = "project"  // a project file in the working directory
	RuleProcfile = "procfile" // the first matching Procfile process
	RuleDefault  = "default"  // nothing matched: DefaultImage
)

// Precedence returns the rules from strongest to weakest.
func Precedence() []string {
	return []string{RuleFlag, RuleConfig, RuleCommand, RuleProject, RuleProcfile, RuleDefault}
}

// MaxProcfileSize is how much of a Procfile is read; the rest is ignored.
const MaxProcfileSize = 64 << 10

// Input is what detection looks at.
type Input struct {
	// ExplicitImage is --image; it wins over everything.
	ExplicitImage string
	// ConfigImage is [sandbox].base_image; it wins over ConfigRuntime.
	ConfigImage string
	// ConfigRuntime is [sandbox].runtime, a shorthand (see Shorthands).
	ConfigRuntime string
	// Args is the command; only the basename of Args[0] is used.
	Args []string
	// Dir is the working directory scanned for project files and a
	// Procfile; "" means the current directory.
	Dir string
}

// Result is the chosen image and why.
type Result struct {
	// Image is the image reference to run.
	Image string `json:"image"`
	// Rule is one of the Rule* constants.
	Rule string `json:"rule"`
	// Detail says what matched: the command ("python3"), the project file
	// ("go.mod"), the Procfile process ("Procfile: web") or the config key
	// ("base_image", "runtime = python"). Empty for flag and default.
	Detail string `json:"detail,omitempty"`
	// Fallback, when set, says that the image is not cached and that a
	// run falls back to the host's own tools if its registry cannot be
	// reached (the caller fills it: detection knows no cache).
	Fallback string `json:"fallback,omitempty"`
}

// String renders the result the way 'agentkernel detect' prints it, e.g.
// `python:3.12-alpine  (rule: command "python3")`, with the fallback
// note on a second line when there is one.
func (r Result) String() string {
	s := r.Image + "  (rule: " + r.Rule + ")"
	if r.Detail != "" {
		s = r.Image + "  (rule: " + r.Rule + " \"" + r.Detail + "\")"
	}
	if r.Fallback != "" {
		s += "\n" + r.Fallback
	}
	return s
}

// CanFallBack reports whether an image chosen by rule may be replaced by
// the host's own tools when it is not cached and its registry cannot be
// reached: only images detection chose; one the user named (flag or
// config) never falls back, and "host" is the host already.
func CanFallBack(image, rule string) bool {
	if image == "host" || image == "host:latest" {
		return false
	}
	return rule != RuleFlag && rule != RuleConfig
}

// FallbackNote is Result.Fallback for image.
func FallbackNote(image string) string {
	return "note: " + image + " is not cached: if its registry cannot be reached, the run falls back to the host's own tools, read-only (image host)"
}

// Image applies the detection precedence to in and never fails: a
// directory that cannot be read simply matches no project file.
func Image(in Input) Result {
	if in.ExplicitImage != "" {
		return Result{Image: in.ExplicitImage, Rule: RuleFlag}
	}
	if in.ConfigImage != "" {
		return Result{Image: in.ConfigImage, Rule: RuleConfig, Detail: "base_image"}
	}
	if in.ConfigRuntime != "" {
		img, ok := RuntimeImage(in.ConfigRuntime)
		if !ok {
			img = DefaultImage // config validation rejects unknown names first
		}
		return Result{Image: img, Rule: RuleConfig, Detail: "runtime = " + in.ConfigRuntime}
	}

	var shell *Result
	if len(in.Args) > 0 {
		name := commandBase(in.Args[0])
		if rt, ok := CommandRuntime(name); ok {
			r := Result{Image: rt.Image, Rule: RuleCommand, Detail: name}
			if !rt.Shell {
				return r
			}
			shell = &r
		}
	}

	dir := in.Dir
	if dir == "" {
		dir = "."
	}
	if rt, file, ok := ProjectRuntime(dir); ok {
		return Result{Image: rt.Image, Rule: RuleProject, Detail: file}
	}
	if e, ok := readProcfile(filepath.Join(dir, "Procfile")); ok {
		return Result{Image: e.Runtime.Image, Rule: RuleProcfile, Detail: "Procfile: " + e.Process}
	}
	if shell != nil {
		return *shell
	}
	return Result{Image: DefaultImage, Rule: RuleDefault}
}

// commandBase is the basename of argv[0] ("/usr/bin/python3" -> "python3").
func commandBase(arg0 string) string {
	arg0 = strings.TrimRight(arg0, "/")
	if arg0 == "" {
		return ""
	}
	return filepath.Base(arg0)
}

// CommandRuntime returns the first table row whose Commands contain name
// exactly (callers pass a basename).
func CommandRuntime(name string) (Runtime, bool) {
	if name == "" {
		return Runtime{}, false
	}
	for _, rt := range Table() {
		for _, c := range rt.Commands {
			if c == name {
				return rt, true
			}
		}
	}
	return Runtime{}, false
}

// ProjectRuntime scans dir's entry names against the table's project
// files and returns the first matching row and the matching entry name.
func ProjectRuntime(dir string) (Runtime, string, bool) {
	f, err := os.Open(dir)
	if err != nil {
		return Runtime{}, "", false
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil && len(names) == 0 {
		return Runtime{}, "", false
	}
	return MatchProjectFiles(names)
}

// MatchProjectFiles is ProjectRuntime on a list of entry names (as found
// in one directory). For "*suffix" patterns the alphabetically first
// matching name is reported.
func MatchProjectFiles(names []string) (Runtime, string, bool) {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	have := make(map[string]bool, len(sorted))
	for _, n := range sorted {
		have[n] = true
	}
	for _, rt := range Table() {
		for _, pat := range rt.ProjectFiles {
			if suffix, ok := strings.CutPrefix(pat, "*"); ok {
				for _, n := range sorted {
					if strings.HasSuffix(n, suffix) {
						return rt, n, true
					}
				}
				continue
			}
			if have[pat] {
				return rt, pat, true
			}
		}
	}
	return Runtime{}, "", false
}

// ProcfileEntry is the Procfile line that selected an image.
type ProcfileEntry struct {
	// Process is the name before the colon ("web").
	Process string
	// Command is the first word of the command ("bundle").
	Command string
	// Runtime is the table row Command matched.
	Runtime Runtime
}

// readProcfile reads at most MaxProcfileSize bytes of a regular file.
func readProcfile(path string) (ProcfileEntry, bool) {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return ProcfileEntry{}, false // a FIFO here would block a plain open
	}
	f, err := os.Open(path)
	if err != nil {
		return ProcfileEntry{}, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxProcfileSize))
	if err != nil {
		return ProcfileEntry{}, false
	}
	return ParseProcfile(data)
}

// ParseProcfile applies upstream's Procfile rule: lines are trimmed; empty
// lines, '#' comments and lines without ':' are skipped; the text after
// the first ':' is the command, whose first word (basename) is looked up
// in the command table; the first line that matches wins. A line whose
// command is empty aborts detection (no match), as upstream does.
func ParseProcfile(data []byte) (ProcfileEntry, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxProcfileSize+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		process, command, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(command)
		if len(fields) == 0 {
			return ProcfileEntry{}, false
		}
		name := commandBase(fields[0])
		if rt, ok := CommandRuntime(name); ok {
			return ProcfileEntry{Process: strings.TrimSpace(process), Command: name, Runtime: rt}, true
		}
	}
	return ProcfileEntry{}, false
}
