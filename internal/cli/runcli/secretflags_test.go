package runcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/config"
	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestParseSecretFlag: the three forms of -S, and what each malformed
// binding is told; an inline value never appears in an error.
func TestParseSecretFlag(t *testing.T) {
	for in, want := range map[string]SecretFlag{
		"GITHUB_TOKEN:api.github.com":                   {Key: "GITHUB_TOKEN", Host: "api.github.com"},
		"ANTHROPIC_API_KEY:api.anthropic.com:x-api-key": {Key: "ANTHROPIC_API_KEY", Host: "api.anthropic.com", Header: "x-api-key"},
		"K=s3cr3t:Allowed.Test":                         {Key: "K", Host: "allowed.test", Value: []byte("s3cr3t")},
		"K=user:pa=ss:allowed.test.":                    {Key: "K", Host: "allowed.test", Value: []byte("user:pa=ss")},
		"my-key_2:a.b":                                  {Key: "my-key_2", Host: "a.b"},
		"K:localhost":                                   {Key: "K", Host: "localhost"},
	} {
		got, err := ParseSecretFlag(in)
		if err != nil || got.Key != want.Key || got.Host != want.Host || got.Header != want.Header || !bytes.Equal(got.Value, want.Value) || got.Inline() != (want.Value != nil) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":                                "expected KEY:HOST",
		"KEY":                             "expected KEY:HOST",
		"KEY:":                            "the host is empty",
		":api.github.com":                 "name is empty",
		"K EY:api.github.com":             "invalid secret name",
		"K$:api.github.com":               "invalid secret name",
		"K:a:b:c":                         "expected KEY:HOST",
		"K:api.github.com:bad header":     "not a header name",
		"K:*.github.com":                  "not a host name",
		"K:api.github.com:443:x":          "expected KEY:HOST",
		"K:https://api.github.com":        "without a scheme",
		"K:10.0.0.1":                      "is an address",
		"K:[::1]":                         "expected KEY:HOST",
		"K:-a.b":                          "not a host name",
		"K=hunter2":                       "needs the host",
		"K=:a.b":                          "value is empty",
		"K=hunter2:a.b:x-api-key":         "not a host name with a domain",
		"K=hunter2:":                      "not a host name with a domain",
		strings.Repeat("K", 129) + ":a.b": "longer than 128",
	} {
		_, err := ParseSecretFlag(in)
		if err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want an error saying %q", in, err, why)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: the error shows the inline value: %v", in, err)
		}
	}
	if _, err := parseSecretFlags([]string{"A:h.test", "B:H.test"}); err == nil || !strings.Contains(err.Error(), "both go in header") {
		t.Errorf("two secrets in one header of one host: %v", err)
	}
	if fs, err := parseSecretFlags([]string{"A:h.test", "B:h.test:x-key", "A:other.test"}); err != nil || len(fs) != 3 {
		t.Errorf("distinct headers and hosts: %v", err)
	}
	many := make([]string, maxSecretFlags+1)
	for i := range many {
		many[i] = "K:h.test"
	}
	if _, err := parseSecretFlags(many); err == nil {
		t.Error("more bindings than the limit were accepted")
	}
}

// TestRunSecretFlags: -S on run's command line, through RunCommand with
// a ResolveSecrets that records what it got: the refusals (exit status
// 125, before anything runs), the daemon never used, and a dry run that
// never shows a value.
func TestRunSecretFlags(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir+"/config")
	run := func(resolve bool, argv ...string) (*RunOptions, []SecretFlag, string, error) {
		t.Helper()
		var out bytes.Buffer
		a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: io.Discard}
		var got []SecretFlag
		if resolve {
			a.ResolveSecrets = func(_ context.Context, fs []SecretFlag) (*sandbox.Secrets, error) {
				got = fs
				s := &sandbox.Secrets{CACert: []byte("cert"), CAKey: []byte("key")}
				for _, f := range fs {
					s.Bindings = append(s.Bindings, sandbox.SecretBinding{Key: f.Key, Host: f.Host, Value: []byte("vault-value")})
				}
				return s, nil
			}
		}
		o, set, args, err := a.ParseRun(argv)
		if err != nil {
			return nil, nil, "", err
		}
		if err := a.SetupLogging(); err != nil {
			t.Fatal(err)
		}
		err = a.RunCommand(context.Background(), o, set, args)
		return o, got, out.String(), err
	}
	code := func(err error) int {
		var ee *ExitError
		if errors.As(err, &ee) {
			return ee.Code
		}
		return -1
	}

	// The network policy: a binding never widens it.
	filtered := sandbox.Network{Mode: sandbox.NetworkFiltered, AllowDomains: []string{"*.allowed.test"}}
	full := sandbox.Network{Mode: sandbox.NetworkFull, BlockDomains: []string{"blocked.test"}}
	for _, c := range []struct {
		n    sandbox.Network
		host string
		why  string
	}{
		{filtered, "allowed.test", ""},
		{filtered, "api.allowed.test", ""},
		{filtered, "other.test", "--allow-domain other.test"},
		{full, "other.test", ""},
		{full, "blocked.test", "blocked by the network policy"},
		{sandbox.Network{Mode: sandbox.NetworkNone}, "allowed.test", "needs network egress"},
	} {
		err := checkSecretHosts(c.n, []SecretFlag{{Key: "K", Host: c.host}})
		var ee *ExitError
		switch {
		case c.why == "" && err != nil:
			t.Errorf("%s under %+v: %v", c.host, c.n, err)
		case c.why != "" && (!errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(ee.Err.Error()+" "+ee.Hint, c.why)):
			t.Errorf("%s under %+v: %v, want exit status 125 saying %q", c.host, c.n, err, c.why)
		}
	}

	// Without ResolveSecrets (the agentkernel binary): agentkernel-full's.
	if _, _, _, err := run(false, "run", "-i", "alpine:3.20", "-S", "K:allowed.test", "--", "true"); !errors.Is(err, ErrNeedsFull) {
		t.Errorf("-S without ResolveSecrets: %v, want ErrNeedsFull", err)
	}

	for _, c := range []struct {
		argv []string
		why  string
	}{
		{[]string{"-S", "K", "--network", "none"}, "expected KEY:HOST"},
		{[]string{"-S", "K:allowed.test", "--network", "none"}, "needs network egress"},
		{[]string{"-S", "K:allowed.test", "--backend", "docker"}, "not supported by backend"},
		{[]string{"-S", "K:allowed.test", "--name", "box"}, "not supported for persistent sandboxes"},
		{[]string{"-S", "K:allowed.test", "--branch"}, "not supported for persistent sandboxes"},
		{[]string{"-S", "K:allowed.test", "--keep", "--network", "full"}, "--keep"},
	} {
		argv := append(append([]string{"run", "--dry-run", "-i", "alpine:3.20"}, c.argv...), "--", "true")
		_, _, _, err := run(true, argv...)
		if err == nil || code(err) != ExitAgentkernel {
			t.Errorf("%v: %v, want exit status %d", c.argv, err, ExitAgentkernel)
			continue
		}
		var ee *ExitError
		errors.As(err, &ee)
		if !strings.Contains(ee.Err.Error()+" "+ee.Hint, c.why) {
			t.Errorf("%v: %q (hint %q), want it to say %q", c.argv, ee.Err, ee.Hint, c.why)
		}
	}
}

// TestBindSandboxSecrets: a persistent sandbox's bindings (-S and the
// trusted configuration's) are checked and resolved once, through
// ResolveSecrets, then recorded in the spec without values or CA; an
// inline value is refused without being quoted; a project file's
// binding is ignored, with a warning.
func TestBindSandboxSecrets(t *testing.T) {
	var stderr bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &stderr}
	resolved := 0
	a.ResolveSecrets = func(_ context.Context, fs []SecretFlag) (*sandbox.Secrets, error) {
		resolved++
		s := &sandbox.Secrets{CACert: []byte("cert"), CAKey: []byte("key")}
		for _, f := range fs {
			if f.Key == "NOPE" {
				return nil, &ExitError{Code: ExitAgentkernel, Err: errors.New("secret 'NOPE' is not in the vault")}
			}
			s.Bindings = append(s.Bindings, sandbox.SecretBinding{Key: f.Key, Host: f.Host, Header: f.Header, Value: []byte("vault-value")})
		}
		return s, nil
	}
	cfg := config.Defaults()
	cfg.Secrets.Backend = "env"
	cfg.Secrets.Bindings = map[string]config.SecretBinding{
		"CFG":  {Host: "api.allowed.test"},
		"PROJ": {Host: "evil.test", Header: "x-api-key"},
	}
	cfg.Sources["secrets.CFG"] = config.Source{Kind: config.SourceUser}
	cfg.Sources["secrets.PROJ"] = config.Source{Kind: config.SourceProject, Path: "/p/agentkernel.toml"}
	newSpec := func() *sandbox.Spec {
		return &sandbox.Spec{Name: "box", Network: sandbox.Network{Mode: sandbox.NetworkFull}}
	}

	spec := newSpec()
	if err := a.BindSandboxSecrets(context.Background(), []string{"GH:api.github.test:x-api-key"}, cfg, spec); err != nil {
		t.Fatal(err)
	}
	want := sandbox.SecretBindings{Backend: "env", Bindings: []sandbox.SecretRef{{Key: "GH", Host: "api.github.test", Header: "x-api-key"}, {Key: "CFG", Host: "api.allowed.test"}}}
	if got := spec.SecretBindings; got == nil || got.Backend != want.Backend || len(got.Bindings) != 2 || got.Bindings[0] != want.Bindings[0] || got.Bindings[1] != want.Bindings[1] {
		t.Errorf("recorded: %+v, want %+v", got, want)
	}
	if spec.Secrets != nil || resolved != 1 {
		t.Errorf("spec.Secrets %+v after the check (resolved %d times)", spec.Secrets, resolved)
	}
	if b, _ := json.Marshal(spec); strings.Contains(string(b), "vault-value") || strings.Contains(string(b), "evil.test") {
		t.Errorf("the spec holds a value or the project's binding: %s", b)
	}
	if !strings.Contains(stderr.String(), `ignoring [secrets] binding "PROJ"`) {
		t.Errorf("no warning about the project's binding: %q", stderr.String())
	}

	for _, c := range []struct {
		bindings []string
		network  sandbox.Network
		want     string
	}{
		{[]string{"GH=hunter2-value:api.github.test"}, sandbox.Network{Mode: sandbox.NetworkFull}, "takes no inline value"},
		{[]string{"NOPE:api.github.test"}, sandbox.Network{Mode: sandbox.NetworkFull}, "secret 'NOPE' is not in the vault"},
		{[]string{"GH:api.github.test"}, sandbox.Network{Mode: sandbox.NetworkNone}, "needs network egress"},
	} {
		spec := newSpec()
		spec.Network = c.network
		err := a.BindSandboxSecrets(context.Background(), c.bindings, cfg, spec)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitAgentkernel || !strings.Contains(ee.Error(), c.want) || strings.Contains(ee.Error()+ee.Hint, "hunter2") || spec.SecretBindings != nil {
			t.Errorf("%v: %v, want exit status 125 saying %q and nothing recorded", c.bindings, err, c.want)
		}
	}

	// No binding at all: nothing recorded, nothing resolved.
	resolved = 0
	spec = newSpec()
	if err := a.BindSandboxSecrets(context.Background(), nil, config.Defaults(), spec); err != nil || spec.SecretBindings != nil || resolved != 0 {
		t.Errorf("no bindings: %v %+v (resolved %d times)", err, spec.SecretBindings, resolved)
	}
}
