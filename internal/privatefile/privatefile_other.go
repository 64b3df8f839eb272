//go:build !unix

package privatefile

import "errors"

var errUnsupported = errors.New("private files need a Unix system")

// Dir: Unix only.
func Dir(dir, what string, create bool) error { return errUnsupported }

// Read: Unix only.
func Read(path, what string, max int64) ([]byte, error) { return nil, errUnsupported }
