package fullbin

import (
	"strings"
	"testing"
)

func TestWantsKube(t *testing.T) {
	for _, tc := range []struct {
		args string
		want bool
	}{
		{"sandbox create x -B kubernetes --image a", true},
		{"-B k8s sandbox list", true},
		{"--backend=kubernetes rm x", true},
		{"sandbox remove x --backend kubernetes", true},
		{"-Bkubernetes ps", true},
		{"-B=kubernetes controller", true},
		{"crds print -B kubernetes", true},
		{"--data-dir /d sandbox create x -B kubernetes", true},
		{"-c cfg.toml --log-level debug -q ps -B k8s", true},
		{"--data-dir sandbox attach -B kubernetes", false}, // "sandbox" is the data directory
		{"sandbox create x", false},
		{"sandbox create x -B gvisor", false},
		{"run -B kubernetes echo hi", true},
		{"run -B k8s -- sh -c x", true},
		{"cp -B kubernetes a dev:/b", true},
		{"exec -B kubernetes dev -- id", true},
		{"run -- echo -B kubernetes", false},
		{"run -B docker echo hi", false},
		{"exec x -- -B kubernetes", false},
		{"sandbox create x -- -B kubernetes", false},
		{"-B", false},
		{"", false},
	} {
		if got := WantsKube(strings.Fields(tc.args)); got != tc.want {
			t.Errorf("WantsKube(%q) = %v", tc.args, got)
		}
	}
}

func TestWantsNomad(t *testing.T) {
	for _, tc := range []struct {
		args string
		want bool
	}{
		{"sandbox create x -B nomad", true},
		{"run -B nomad -- true", true},
		{"-B nomad rm x", true},
		{"sandbox create x -B kubernetes", false},
		{"run -B native -- nomad", false},
		{"run -- -B nomad", false},
	} {
		if got := WantsNomad(strings.Fields(tc.args)); got != tc.want {
			t.Errorf("WantsNomad(%q) = %v", tc.args, got)
		}
	}
}
