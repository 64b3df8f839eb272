//go:build !linux

package image

import (
	"context"
	"errors"
	"io"
)

// writeLayerTar reads overlayfs layers, which exist only on Linux.
func writeLayerTar(ctx context.Context, dir string, w io.Writer, o layerTarOptions) error {
	return errors.New("exporting layers needs Linux")
}

type layerTarOptions struct {
	idmap              IDMap
	ownerUID, ownerGID int
	rootless           bool
	sub                subRanges
}

type subRanges struct {
	uidStart, uidCount, gidStart, gidCount uint32
}
