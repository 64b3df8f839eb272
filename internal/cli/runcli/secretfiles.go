package runcli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/agentkernel/agentkernel/internal/sandbox"
)

// SecretFileHelp is the part of run's --help about --secret-file and
// --placeholder-secrets.
const SecretFileHelp = `Secret files: --secret-file KEY (repeatable) writes the secret KEY (the
vault's, or the VALUE of -S KEY=VALUE:HOST) to the file
` + sandbox.SecretFilesDir + `/KEY inside the sandbox, mode 0400 and owned by the
command's user, and sets AGENTKERNEL_SECRETS_PATH=` + sandbox.SecretFilesDir + `.
Unlike -S, this puts the real value INSIDE the sandbox, where the command and
anything it runs can read it and send it anywhere its network reaches: use it
only for a program that must have the value itself. The files are on a
read-only tmpfs of their own (memory, never the disk or the sandbox's writable
layer). With --placeholder-secrets each file holds the placeholder
ak-proxy-managed instead, and every KEY given to --secret-file must also be
bound with -S KEY:HOST: the program reads the placeholder from the file, and
the network stack puts the real value in its header on the way to HOST, as
for -S.`

// maxSecretFiles bounds a run's --secret-file keys.
const maxSecretFiles = 32

// bindSecretFileFlags registers --secret-file and --placeholder-secrets
// into fs.
func bindSecretFileFlags(fs *pflag.FlagSet, o *RunOptions) {
	fs.StringArrayVar(&o.secretFiles, "secret-file", nil, "write the secret KEY to "+sandbox.SecretFilesDir+"/KEY inside the sandbox (mode 0400): the value ENTERS the sandbox, unlike -S (repeatable; see Secret files above)")
	fs.BoolVar(&o.placeholderSecrets, "placeholder-secrets", false, "--secret-file files hold the placeholder, and the network stack adds the real value for the key's -S host")
}

// checkSecretFileFlags checks --secret-file's keys and
// --placeholder-secrets before anything is resolved: every failure is
// exit status 125.
func checkSecretFileFlags(o *RunOptions) error {
	fail := func(err error, hint string) error {
		return &ExitError{Code: ExitAgentkernel, Err: err, Hint: hint}
	}
	if o.placeholderSecrets && len(o.secretFiles) == 0 {
		return fail(errors.New("--placeholder-secrets without --secret-file: it says what the --secret-file files hold"), "give --secret-file KEY (and -S KEY:HOST)")
	}
	if len(o.secretFiles) > maxSecretFiles {
		return fail(fmt.Errorf("--secret-file: %d keys, more than %d", len(o.secretFiles), maxSecretFiles), "")
	}
	for _, k := range o.secretFiles {
		// The key is the file's name: the vault's rule for names allows
		// no '/', and no name is "." or "..".
		if err := checkSecretKey(k); err != nil {
			return fail(fmt.Errorf("--secret-file %.130q: %v", k, err), "")
		}
	}
	return nil
}

// bindSecretFiles gives spec the files of --secret-file, once its
// bindings are resolved: the values (a bound key's from its binding in
// spec.Secrets, else the vault's through App.SecretValues) or, with
// --placeholder-secrets, the placeholder of a bound key. Every failure is
// exit status 125.
func (a *App) bindSecretFiles(ctx context.Context, o *RunOptions, spec *sandbox.Spec) error {
	if len(o.secretFiles) == 0 {
		return nil
	}
	if err := checkSecretFileFlags(o); err != nil {
		return err
	}
	fail := func(err error, hint string) error {
		return &ExitError{Code: ExitAgentkernel, Err: err, Hint: hint}
	}
	var keys []string
	seen := map[string]bool{}
	for _, k := range o.secretFiles {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	bound := map[string][]byte{}
	if spec.Secrets != nil {
		for _, b := range spec.Secrets.Bindings {
			if _, ok := bound[b.Key]; !ok {
				bound[b.Key] = b.Value
			}
		}
	}
	files := make([]sandbox.SecretFile, len(keys))
	var fromVault []string
	var at []int // files[at[j]] is fromVault[j]'s
	for i, k := range keys {
		files[i].Key = k
		v, ok := bound[k]
		switch {
		case o.placeholderSecrets && !ok:
			return fail(fmt.Errorf("--placeholder-secrets: --secret-file %s has no -S/--secret binding, so no request would ever carry its value", k),
				"bind it: -S "+k+":HOST (the file's placeholder is replaced in requests to HOST)")
		case o.placeholderSecrets:
			files[i].Value = []byte(sandbox.SecretPlaceholder)
		case ok:
			files[i].Value = v
		default:
			fromVault, at = append(fromVault, k), append(at, i)
		}
	}
	if len(fromVault) > 0 {
		if a.SecretValues == nil {
			return fmt.Errorf("%w: --secret-file", ErrNeedsFull)
		}
		vs, err := a.SecretValues(ctx, fromVault)
		if err != nil {
			var ee *ExitError
			if errors.As(err, &ee) {
				return err
			}
			return fail(err, "")
		}
		if len(vs) != len(fromVault) {
			return fail(errors.New("--secret-file: the vault gave too few values"), "")
		}
		for j, i := range at {
			files[i].Value = vs[j]
		}
	}
	if spec.Secrets == nil {
		spec.Secrets = &sandbox.Secrets{}
	}
	spec.Secrets.Files = files
	return nil
}
