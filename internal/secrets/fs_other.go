//go:build !unix

package secrets

func unsupportedFile() error {
	return &Error{Kind: ErrUnsupported, msg: "the 'file' secrets backend needs a Unix system (file ownership and flock): use [secrets] backend = \"env\""}
}

func checkDir(string, bool) error { return unsupportedFile() }

func readPrivate(string, string, int64, error) ([]byte, error) { return nil, unsupportedFile() }

func lockFile(string) (func(), error) { return nil, unsupportedFile() }
