package tundev

import (
	"errors"
	"fmt"
)

// ErrUnsupported is returned by Open and Configure where TUN devices are
// not available (systems other than Linux).
var ErrUnsupported = errors.New("TUN devices are only supported on Linux")

func errorf(format string, args ...any) error {
	return fmt.Errorf("tundev: "+format, args...)
}
