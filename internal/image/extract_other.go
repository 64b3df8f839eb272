//go:build !linux

package image

import (
	"context"
	"errors"
	"io"
)

// extractTar needs openat2(2); image layers can only be unpacked on Linux.
func extractTar(ctx context.Context, r io.Reader, dir string, opts extractOptions) (extractStats, error) {
	return extractStats{}, errors.New("unpacking image layers needs Linux")
}
