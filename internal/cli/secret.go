package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentkernel/agentkernel/internal/secrets"
)

const secretLong = `Store API keys and tokens on the host, encrypted at rest. This command
manages the vault; 'agentkernel run -S KEY:HOST' hands a secret to a
sandbox's requests to HOST without it entering the sandbox (see 'run --help'
and docs/secrets.md).

The backend is [secrets] backend in the configuration:

  file     the default. One vault file, <data dir>/secrets/vault.age, encrypted
           with age (X25519) to the key in <data dir>/secrets/key, made on the
           first 'secret set'; or to the key in AGENTKERNEL_SECRETS_KEY (an
           AGE-SECRET-KEY-1... string), and then no key file is read or written.
           The data directory is --data-dir, default $XDG_DATA_HOME/agentkernel
           or ~/.local/share/agentkernel. The directory is 0700, its files 0600;
           a file that group or others can read, or that is not yours, is
           refused. Names and values are both inside the encrypted file.
  env      read-only: 'secret get KEY' reads the host's environment variable
           KEY; set and delete are refused, list is empty.
  keyring  not supported in this build.

Names are 1 to 128 of A-Z, a-z, 0-9, '_' and '-'; values 1 byte to 64 KiB,
any bytes.`

func newSecretCmd(a *App) *cobra.Command {
	c := &cobra.Command{
		Use:     "secret",
		Aliases: []string{"secrets"},
		Short:   "Keep API keys and tokens in an encrypted vault on the host",
		Long:    secretLong,
		Example: `  agentkernel secret set GITHUB_TOKEN              # prompts, input hidden
  gh auth token | agentkernel secret set GITHUB_TOKEN
  agentkernel secret list
  curl -H "Authorization: Bearer $(agentkernel secret get GITHUB_TOKEN)" ...
  agentkernel secret delete GITHUB_TOKEN`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	c.AddCommand(newSecretSetCmd(a), newSecretGetCmd(a), newSecretListCmd(a), newSecretDeleteCmd(a))
	return c
}

func newSecretSetCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "set KEY [VALUE]",
		Short: "Store a secret (the value from stdin when VALUE is omitted)",
		Long: `Store the value of KEY in the vault, replacing any value it had.

Without VALUE the value is read from stdin: on a terminal it is prompted for
and not echoed; otherwise all of stdin is read and one trailing newline is
dropped (so 'echo TOKEN | agentkernel secret set KEY' stores TOKEN). VALUE on
the command line works too, but it is visible in your shell's history and to
other users' process listings, so prefer stdin.

` + secretLong,
		Example: `  agentkernel secret set OPENAI_API_KEY
  agentkernel secret set GITHUB_TOKEN < token.txt
  printf '%s' "$TOKEN" | agentkernel secret set TOKEN`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := secrets.CheckKey(key); err != nil {
				return secretError(err)
			}
			v, err := a.openVault()
			if err != nil {
				return err
			}
			if v.Backend() == secrets.BackendEnv {
				// Refused before any value is asked for.
				return secretError(v.Set(key, nil))
			}
			var value []byte
			if len(args) == 2 {
				a.Warnf("a value given on the command line is visible in shell history and process lists: pipe it in on stdin instead")
				value = []byte(args[1])
			} else if value, err = a.readSecretValue(key); err != nil {
				return err
			}
			if err := v.Set(key, value); err != nil {
				return secretError(err)
			}
			clear(value)
			a.Infof("Secret '%s' stored in %s", key, v.Location())
			return nil
		},
	}
}

func newSecretGetCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:   "get KEY",
		Short: "Print a secret's value",
		Long: `Print the value of KEY, exactly as stored: a newline follows it only when
stdout is a terminal, so $(agentkernel secret get KEY) and pipes get the value's
own bytes. A missing KEY exits 1.

` + secretLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.openVault()
			if err != nil {
				return err
			}
			value, err := v.Get(args[0])
			if err != nil {
				return secretError(err)
			}
			if isTerminal(a.Stdout) {
				value = append(value, '\n')
			}
			_, err = a.Stdout.Write(value)
			clear(value)
			return err
		},
	}
}

func newSecretListCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the names of the stored secrets (never their values)",
		Long: `Print "Keys:" and then the name of each stored secret, sorted, two spaces in.
Values are never printed. The env backend lists nothing.

` + secretLong,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.openVault()
			if err != nil {
				return err
			}
			names, err := v.List()
			if err != nil {
				return secretError(err)
			}
			var b bytes.Buffer
			b.WriteString("Keys:\n")
			for _, n := range names {
				fmt.Fprintf(&b, "  %s\n", n)
			}
			_, err = a.Stdout.Write(b.Bytes())
			return err
		},
	}
}

func newSecretDeleteCmd(a *App) *cobra.Command {
	return &cobra.Command{
		Use:     "delete KEY",
		Aliases: []string{"rm"},
		Short:   "Remove a secret from the vault",
		Long: `Remove KEY and its value from the vault. A missing KEY exits 1.

` + secretLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.openVault()
			if err != nil {
				return err
			}
			if err := v.Delete(args[0]); err != nil {
				return secretError(err)
			}
			a.Infof("Secret '%s' deleted", args[0])
			return nil
		},
	}
}

// openVault opens the vault [secrets] backend names, in the data
// directory.
func (a *App) openVault() (secrets.Vault, error) {
	cfg, err := a.LoadConfig(".")
	if err != nil {
		return nil, err
	}
	v, err := secrets.Open(secrets.Options{Backend: cfg.Secrets.Backend, DataDir: a.DataDir})
	if err != nil {
		return nil, secretError(err)
	}
	return v, nil
}

// secretError gives a vault error its exit status: 1 for a missing
// secret, else 125, with a hint where one helps.
func secretError(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, secrets.ErrNotFound):
		return &ExitError{Code: 1, Err: err, Hint: "'agentkernel secret list' shows the stored names"}
	case errors.Is(err, secrets.ErrInvalidKey), errors.Is(err, secrets.ErrInvalidValue):
		return &ExitError{Code: ExitAgentkernel, Err: err, Hint: "see 'agentkernel secret --help'"}
	}
	return &ExitError{Code: ExitAgentkernel, Err: err}
}

// readSecretValue reads a value from stdin: prompted for without echo on
// a terminal, else all of it, less one trailing newline.
func (a *App) readSecretValue(key string) ([]byte, error) {
	if f, ok := a.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(a.Stderr, "Value for secret '%s' (input hidden): ", key)
		v, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(a.Stderr)
		if err != nil {
			return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("reading the value from the terminal: %w", err)}
		}
		return v, nil
	}
	// One byte over the limit (after the newline) is enough to refuse.
	v, err := io.ReadAll(io.LimitReader(a.Stdin, secrets.MaxValueSize+2))
	if err != nil {
		return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("reading the value from stdin: %w", err)}
	}
	if n := len(v); n > 0 && v[n-1] == '\n' {
		v = v[:n-1]
	}
	if len(v) > secrets.MaxValueSize {
		return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("the value for secret '%s' on stdin is over the limit of %d bytes (64 KiB)", key, secrets.MaxValueSize)}
	}
	if len(v) == 0 {
		return nil, &ExitError{Code: ExitAgentkernel, Err: fmt.Errorf("no value for secret '%s' on stdin", key),
			Hint: "pipe the value in (printf '%s' \"$VALUE\" | agentkernel secret set KEY), or run it on a terminal to be prompted"}
	}
	return v, nil
}

// isTerminal says whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
