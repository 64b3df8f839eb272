package workflow

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Step is one [[step]] of a pipeline file.
type Step struct {
	Name    string `toml:"name"`
	Image   string `toml:"image"`
	Command string `toml:"command"`
	Input   string `toml:"input"`
	Output  string `toml:"output"`
	// Per-step settings: the security profile and limits ("" or 0: 1
	// CPU, 512m of memory, no timeout, the default profile).
	Profile string  `toml:"profile"`
	Memory  string  `toml:"memory"`
	CPUs    float64 `toml:"cpus"`
	Timeout string  `toml:"timeout"`

	// Line is the line of the step's [[step]] header.
	Line int `toml:"-"`
	// Args is Command split on white space; TimeoutD is Timeout parsed.
	Args     []string      `toml:"-"`
	TimeoutD time.Duration `toml:"-"`
}

// Pipeline defaults for a step that sets no limits.
const (
	DefaultMemory = "512m"
	DefaultCPUs   = 1.0
)

type pipelineFile struct {
	Step []Step `toml:"step"`
}

// ParsePipeline reads a pipeline file's contents (file names it in
// errors, "file:line: ..."). Steps need a name (unique, not empty,
// without '/', '\' or ".."), an image and a command; input and output,
// when set, are absolute paths.
func ParsePipeline(file string, data []byte) ([]Step, error) {
	// Compiled here, not at package init: agentkernel-full starts for
	// every command.
	var (
		stepHeader = regexp.MustCompile(`^\s*\[\[\s*step\s*\]\]`)
		tableHead  = regexp.MustCompile(`^\s*\[`)
		// decodeErr is how the TOML decoder words a value of the wrong
		// type.
		decodeErr = regexp.MustCompile(`^toml: line (\d+) \(last key "([^"]*)"\): (.*)$`)
	)
	var pf pipelineFile
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&pf)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s:%d: %s", file, pe.Position.Line, pe.Message)
		}
		if m := decodeErr.FindStringSubmatch(err.Error()); m != nil {
			return nil, fmt.Errorf("%s:%s: %s: %s", file, m[1], m[2], m[3])
		}
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	lines := strings.Split(string(data), "\n")
	// The line of each [[step]] header, and of each key in its table.
	var heads []int
	for i, l := range lines {
		if stepHeader.MatchString(l) {
			heads = append(heads, i+1)
		}
	}
	keyLine := func(step int, key string) int {
		if step >= len(heads) {
			return 1
		}
		re := regexp.MustCompile(`^\s*"?` + regexp.QuoteMeta(key) + `"?\s*=`)
		for i := heads[step]; i < len(lines); i++ {
			if tableHead.MatchString(lines[i]) {
				break
			}
			if re.MatchString(lines[i]) {
				return i + 1
			}
		}
		return heads[step]
	}
	for _, k := range md.Undecoded() {
		line := 1
		if len(k) >= 2 && k[0] == "step" {
			// Which step: the first whose table has the key.
			for s := range heads {
				if l := keyLine(s, k[len(k)-1]); l != heads[s] {
					line = l
					break
				}
			}
		}
		return nil, fmt.Errorf("%s:%d: unknown key %q (a step has name, image, command, input, output, profile, memory, cpus, timeout)", file, line, k.String())
	}
	if len(pf.Step) == 0 {
		return nil, fmt.Errorf("%s: Pipeline has no steps", file)
	}
	seen := map[string]bool{}
	for i := range pf.Step {
		s := &pf.Step[i]
		if i < len(heads) {
			s.Line = heads[i]
		}
		at := func(key, format string, args ...any) error {
			return fmt.Errorf("%s:%d: step %d: %s", file, keyLine(i, key), i+1, fmt.Sprintf(format, args...))
		}
		if err := ValidName(s.Name); err != nil {
			return nil, at("name", "%v", err)
		}
		if seen[s.Name] {
			return nil, at("name", "Duplicate step name: '%s'", s.Name)
		}
		seen[s.Name] = true
		if strings.TrimSpace(s.Image) == "" {
			return nil, at("image", "step '%s' has no image", s.Name)
		}
		s.Args = strings.Fields(s.Command)
		if len(s.Args) == 0 {
			return nil, at("command", "step '%s' has no command", s.Name)
		}
		for _, d := range []struct{ key, val string }{{"input", s.Input}, {"output", s.Output}} {
			if d.val == "" {
				continue
			}
			if !path.IsAbs(d.val) || strings.ContainsAny(d.val, ":,\x00") || path.Clean(d.val) == "/" {
				return nil, at(d.key, "%s %q must be an absolute directory path other than / (without ':' or ',')", d.key, d.val)
			}
		}
		if s.Input != "" && s.Output != "" && path.Clean(s.Input) == path.Clean(s.Output) {
			return nil, at("output", "step '%s': input and output are the same directory", s.Name)
		}
		if s.CPUs < 0 {
			return nil, at("cpus", "cpus must be positive")
		}
		if s.Timeout != "" {
			d, err := time.ParseDuration(s.Timeout)
			if err != nil || d <= 0 {
				return nil, at("timeout", "timeout %q: use a duration such as 30s or 5m", s.Timeout)
			}
			s.TimeoutD = d
		}
	}
	return pf.Step, nil
}

// ValidName checks a step's or a job's name: not empty, no '/', '\' or
// "..", and usable in a sandbox name (letters, digits, '-', '_', '.').
func ValidName(name string) error {
	switch {
	case name == "":
		return errors.New("a name must not be empty")
	case strings.ContainsAny(name, `/\`) || strings.Contains(name, ".."):
		return fmt.Errorf("name %q must not contain '/', '\\' or '..'", name)
	case len(name) > 48:
		return fmt.Errorf("name %q is longer than 48 characters", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("name %q: use letters, digits, '-', '_' and '.'", name)
		}
	}
	return nil
}
