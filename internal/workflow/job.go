package workflow

import (
	"fmt"
	"strings"
)

// JobSpec is one --job of 'parallel'.
type JobSpec struct {
	Name  string
	Image string
	Args  []string
}

// ParseJobSpec reads "name:image:command" or "name:image:tag:command"
// (an image without a tag gets ":latest"; "lint:node:npx eslint ." runs
// npx eslint . in node:latest). The command is split on white space, with
// no shell quoting. validImage says whether a string is an image
// reference: the image is the longest that is, so that references with a
// registry's port ("localhost:5000/tools:1") read as one.
func ParseJobSpec(s string, validImage func(string) bool) (JobSpec, error) {
	name, rest, ok := strings.Cut(s, ":")
	if !ok {
		return JobSpec{}, fmt.Errorf("job %q: use NAME:IMAGE:COMMAND or NAME:IMAGE:TAG:COMMAND", s)
	}
	if err := ValidName(name); err != nil {
		return JobSpec{}, fmt.Errorf("job %q: %v", s, err)
	}
	img, cmd := "", ""
	for i := 0; i < len(rest); i++ {
		if rest[i] != ':' {
			continue
		}
		cand := rest[:i]
		if cand != "" && !strings.ContainsAny(cand, " \t") && validImage(cand) {
			img, cmd = cand, rest[i+1:]
		}
	}
	if img == "" {
		return JobSpec{}, fmt.Errorf("job %q: no image: use NAME:IMAGE:COMMAND or NAME:IMAGE:TAG:COMMAND", s)
	}
	args := strings.Fields(cmd)
	if len(args) == 0 {
		return JobSpec{}, fmt.Errorf("job %q: no command: use NAME:IMAGE:COMMAND or NAME:IMAGE:TAG:COMMAND", s)
	}
	if !hasTag(img) {
		img += ":latest"
	}
	return JobSpec{Name: name, Image: img, Args: args}, nil
}

// hasTag reports whether ref names a tag or a digest (a ':' after its
// last '/', or an '@').
func hasTag(ref string) bool {
	if strings.Contains(ref, "@") {
		return true
	}
	return strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":")
}
