package runcli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// TestRunSecretFiles: --secret-file and --placeholder-secrets on run's
// command line: hostile key names and misuse refused with exit status
// 125 before anything runs, agentkernel-full's vault asked only for the
// keys no binding gives, a key it lacks named, and with
// --placeholder-secrets the files hold the placeholder of bound keys.
func TestRunSecretFiles(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", dir+"/config")
	var asked []string
	newApp := func(full bool) *App {
		a := &App{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard}
		if full {
			a.ResolveSecrets = func(_ context.Context, fs []SecretFlag) (*sandbox.Secrets, error) {
				s := &sandbox.Secrets{CACert: []byte("cert"), CAKey: []byte("key")}
				for _, f := range fs {
					v := f.Value
					if v == nil {
						v = []byte("vault-" + f.Key)
					}
					s.Bindings = append(s.Bindings, sandbox.SecretBinding{Key: f.Key, Host: f.Host, Value: v})
				}
				return s, nil
			}
			a.SecretValues = func(_ context.Context, keys []string) ([][]byte, error) {
				asked = append(asked, keys...)
				var vs [][]byte
				for _, k := range keys {
					if k == "MISSING" {
						return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("--secret-file %s: secret '%s' is not in the vault", k, k)}
					}
					vs = append(vs, []byte("vault-"+k))
				}
				return vs, nil
			}
		}
		return a
	}
	// resolve parses argv and binds its secrets to a spec with egress,
	// as a run does.
	resolve := func(full bool, argv ...string) (*sandbox.Spec, error) {
		t.Helper()
		a := newApp(full)
		o, set, args, err := a.ParseRun(append(append([]string{"run", "--network", "full"}, argv...), "--", "true"))
		if err != nil {
			return nil, err
		}
		if err := checkRunHabits(o, set, args); err != nil {
			return nil, err
		}
		if err := a.checkSecretRun(o); err != nil {
			return nil, err
		}
		spec := &sandbox.Spec{Network: sandbox.Network{Mode: sandbox.NetworkFull}}
		return spec, a.bindSecrets(context.Background(), o, spec)
	}
	files := func(s *sandbox.Spec) string {
		var b bytes.Buffer
		if s.Secrets != nil {
			for _, f := range s.Secrets.Files {
				fmt.Fprintf(&b, "%s=%s;", f.Key, f.Value)
			}
		}
		return b.String()
	}

	for _, c := range []struct {
		argv  []string
		want  string
		asked string
	}{
		{[]string{"--secret-file", "A", "--secret-file", "B", "--secret-file", "A"}, "A=vault-A;B=vault-B;", "A,B"},
		// A bound key's file holds its binding's value, inline or the
		// vault's as resolved for the binding.
		{[]string{"-S", "A=inline-a:api.test", "-S", "B:api.test:x-b", "--secret-file", "A", "--secret-file", "B", "--secret-file", "C"}, "A=inline-a;B=vault-B;C=vault-C;", "C"},
		{[]string{"-S", "A=inline-a:api.test", "--secret-file", "A", "--placeholder-secrets"}, "A=" + sandbox.SecretPlaceholder + ";", ""},
		// The gvisor backend writes them as native does.
		{[]string{"--secret-file", "A", "--backend", "gvisor"}, "A=vault-A;", "A"},
	} {
		asked = nil
		spec, err := resolve(true, c.argv...)
		if err != nil {
			t.Errorf("%v: %v", c.argv, err)
			continue
		}
		if got := files(spec); got != c.want {
			t.Errorf("%v: files %q, want %q", c.argv, got, c.want)
		}
		if got := strings.Join(asked, ","); got != c.asked {
			t.Errorf("%v: the vault was asked for %q, want %q", c.argv, got, c.asked)
		}
	}

	for _, c := range []struct {
		argv []string
		why  string
	}{
		{[]string{"--secret-file", "../../etc/passwd"}, "invalid secret name"},
		{[]string{"--secret-file", "a/b"}, "invalid secret name"},
		{[]string{"--secret-file", ".."}, "invalid secret name"},
		{[]string{"--secret-file", ""}, "name is empty"},
		{[]string{"--secret-file", "MISSING"}, "secret 'MISSING' is not in the vault"},
		{[]string{"--placeholder-secrets"}, "--placeholder-secrets without --secret-file"},
		{[]string{"--secret-file", "K", "--placeholder-secrets"}, "--secret-file K has no -S/--secret binding"},
		{[]string{"-S", "OTHER:api.test", "--secret-file", "K", "--placeholder-secrets"}, "--secret-file K has no -S/--secret binding"},
		{[]string{"--secret-file", "K", "--name", "box"}, "--secret-file with --keep, --name, -d or --branch"},
		{[]string{"--secret-file", "K", "--backend", "docker"}, "--secret-file is not supported by backend docker"},
	} {
		_, err := resolve(true, c.argv...)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitAgentkernel {
			t.Errorf("%v: %v, want exit status %d", c.argv, err, ExitAgentkernel)
			continue
		}
		if !strings.Contains(ee.Err.Error()+" "+ee.Hint, c.why) {
			t.Errorf("%v: %q (hint %q), want it to say %q", c.argv, ee.Err, ee.Hint, c.why)
		}
	}
	many := []string{}
	for i := range maxSecretFiles + 1 {
		many = append(many, "--secret-file", fmt.Sprintf("K%d", i))
	}
	if _, err := resolve(true, many...); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d --secret-file: %v", maxSecretFiles+1, err)
	}
	// The agentkernel binary has no vault: agentkernel-full's.
	if _, err := resolve(false, "--secret-file", "K"); !errors.Is(err, ErrNeedsFull) {
		t.Errorf("--secret-file without the vault: %v, want ErrNeedsFull", err)
	}
}
