package image

import (
	"archive/tar"
	"errors"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"
)

// tarFS is a read-only fs.FS over an uncompressed, seekable tar (a
// `docker save` tarball or an OCI layout tar), indexed once so that each
// blob is read straight from its offset instead of by rescanning the tar.
type tarFS struct {
	r     io.ReaderAt
	files map[string]*tarEntry
}

type tarEntry struct {
	name     string
	off      int64
	size     int64
	typ      byte
	linkname string
	mode     fs.FileMode
	mtime    time.Time
}

// positionReader tracks how far the tar reader has read, which is where
// an entry's data starts right after Next (archive/tar does not read
// ahead).
type positionReader struct {
	r   io.ReaderAt
	off int64
}

func (p *positionReader) Read(b []byte) (int, error) {
	n, err := p.r.ReadAt(b, p.off)
	p.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// Seek lets archive/tar skip entry data without reading it.
func (p *positionReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		p.off += off
	case io.SeekStart:
		p.off = off
	default:
		return 0, errors.New("seek: unsupported whence")
	}
	return p.off, nil
}

func newTarFS(r io.ReaderAt) (*tarFS, error) {
	t := &tarFS{r: r, files: map[string]*tarEntry{}}
	pr := &positionReader{r: r}
	tr := tar.NewReader(pr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		name := cleanFSName(hdr.Name)
		if name == "" {
			continue
		}
		t.files[name] = &tarEntry{
			name: name, off: pr.off, size: hdr.Size, typ: hdr.Typeflag,
			linkname: hdr.Linkname, mode: hdr.FileInfo().Mode(), mtime: hdr.ModTime,
		}
	}
	return t, nil
}

func cleanFSName(n string) string {
	p := path.Clean("/" + n)
	return strings.TrimPrefix(p, "/")
}

// resolve follows symlinks and hardlinks between entries (docker save
// links duplicate layer.tar files).
func (t *tarFS) resolve(name string) (*tarEntry, error) {
	for i := 0; i < 16; i++ {
		e := t.files[name]
		if e == nil {
			return nil, fs.ErrNotExist
		}
		switch e.typ {
		case tar.TypeSymlink:
			if strings.HasPrefix(e.linkname, "/") {
				name = cleanFSName(e.linkname)
			} else {
				name = cleanFSName(path.Join(path.Dir(name), e.linkname))
			}
		case tar.TypeLink:
			name = cleanFSName(e.linkname)
		default:
			return e, nil
		}
	}
	return nil, errors.New("too many links")
}

// Open implements fs.FS.
func (t *tarFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	e, err := t.resolve(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &tarFile{SectionReader: io.NewSectionReader(t.r, e.off, e.size), e: e}, nil
}

type tarFile struct {
	*io.SectionReader
	e *tarEntry
}

func (f *tarFile) Stat() (fs.FileInfo, error) { return tarInfo{f.e}, nil }
func (f *tarFile) Close() error               { return nil }

type tarInfo struct{ e *tarEntry }

func (i tarInfo) Name() string       { return path.Base(i.e.name) }
func (i tarInfo) Size() int64        { return i.e.size }
func (i tarInfo) Mode() fs.FileMode  { return i.e.mode }
func (i tarInfo) ModTime() time.Time { return i.e.mtime }
func (i tarInfo) IsDir() bool        { return i.e.mode.IsDir() }
func (i tarInfo) Sys() any           { return nil }
