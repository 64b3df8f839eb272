package image

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// extractOptions say what the extractor may do beyond writing files the
// caller owns.
type extractOptions struct {
	idmap IDMap
	// chown files to the (shifted) ids of the tar; needs root.
	chown bool
	// devices creates character and block devices; needs root.
	devices bool
	// trustedXattrs writes trusted.overlay.opaque and keeps
	// security.capability; needs root.
	trustedXattrs bool
	// maxBytes caps the file content of one layer (0: no cap). A layer
	// can declare sparse files of any size, which archive/tar expands
	// to zeros; the fuzzer needs a bound.
	maxBytes int64
}

// privilegedExtract is what a root store does.
func privilegedExtract(m IDMap) extractOptions {
	return extractOptions{idmap: m, chown: true, devices: true, trustedXattrs: true}
}

// extractStats count what one layer contained and what was left out.
type extractStats struct {
	Files          int   `json:"files"`
	Dirs           int   `json:"dirs"`
	Symlinks       int   `json:"symlinks"`
	Hardlinks      int   `json:"hardlinks"`
	Devices        int   `json:"devices,omitempty"`
	Whiteouts      int   `json:"whiteouts,omitempty"`
	Opaques        int   `json:"opaques,omitempty"`
	Bytes          int64 `json:"bytes"`
	SkippedDevices int   `json:"skipped_devices,omitempty"`
	SkippedXattrs  int   `json:"skipped_xattrs,omitempty"`
	SkippedEntries int   `json:"skipped_entries,omitempty"`
}

// VFS capability xattr layout (linux/capability.h).
const (
	vfsCapRevisionMask = 0xFF000000
	vfsCapRevision2    = 0x02000000
	vfsCapRevision3    = 0x03000000
	vfsCapFlags        = 0x000000FF
	vfsCapSize2        = 20
	vfsCapSize3        = 24
)

// filterXattr decides whether an image may set xattr name, and returns
// the value to write. See the package documentation for the policy.
func filterXattr(name string, val []byte, o extractOptions) ([]byte, bool) {
	switch {
	case strings.HasPrefix(name, "user.overlay."):
		return nil, false
	case strings.HasPrefix(name, "user."):
		return val, true
	case name == "security.capability":
		if !o.trustedXattrs {
			return nil, false
		}
		return shiftCapability(val, o.idmap.HostUID(0))
	}
	return nil, false
}

// shiftCapability rewrites a file capability so that it applies to the
// user namespace whose root is host uid rootID: a v3 capability with that
// root id (or v2 when rootID is 0, i.e. no shift).
func shiftCapability(v []byte, rootID int) ([]byte, bool) {
	if len(v) < 4 {
		return nil, false
	}
	magic := binary.LittleEndian.Uint32(v)
	switch magic & vfsCapRevisionMask {
	case vfsCapRevision2:
		if len(v) != vfsCapSize2 {
			return nil, false
		}
	case vfsCapRevision3:
		if len(v) != vfsCapSize3 {
			return nil, false
		}
	default:
		return nil, false
	}
	flags := magic & vfsCapFlags
	if rootID == 0 {
		out := make([]byte, vfsCapSize2)
		copy(out, v[:vfsCapSize2])
		binary.LittleEndian.PutUint32(out, vfsCapRevision2|flags)
		return out, true
	}
	out := make([]byte, vfsCapSize3)
	copy(out, v[:vfsCapSize2])
	binary.LittleEndian.PutUint32(out, vfsCapRevision3|flags)
	binary.LittleEndian.PutUint32(out[vfsCapSize2:], uint32(rootID))
	return out, true
}

// Compression formats a layer stream may use.
const (
	compressionNone = "tar"
	compressionGzip = "gzip"
	compressionZstd = "zstd"
)

// decompress sniffs r's first bytes and returns a reader of the
// uncompressed tar, the format found, and a function releasing decoder
// resources.
func decompress(r io.Reader) (io.Reader, string, func(), error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, "", nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, compressionGzip, func() { _ = zr.Close() }, nil
	case len(magic) == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd:
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, "", nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, compressionZstd, zr.Close, nil
	}
	return br, compressionNone, func() {}, nil
}
