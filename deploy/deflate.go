package deploy

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"strings"
)

// HasZstd reports whether the zip archive r (size bytes) lists a file
// compressed with Zstandard, which managers before bundle protocol 1.2.0
// do not read. It reads only the archive's directory; what is not a zip
// archive has none.
func HasZstd(r io.ReaderAt, size int64) bool {
	zr, err := zip.NewReader(r, size)
	if zr == nil || err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return false
	}
	return anyZstd(zr.File)
}

// Zstd reports whether any file of the bundle is compressed with
// Zstandard.
func (b *Bundle) Zstd() bool { return anyZstd(b.zr.File) }

func anyZstd(files []*zip.File) bool {
	for _, f := range files {
		if f.Method == zipZstd {
			return true
		}
	}
	return false
}

// WriteDeflated writes the bundle to w as a manager before bundle
// protocol 1.2.0 reads it: every Zstandard file inflated and deflated
// again, every directory and every other file as it is (a stored or
// deflated file's compressed bytes are copied), in the same order, with
// the same names, modes and times. The same bundle always gives the same
// bytes, and a bundle that Pack or PackProgram wrote with Zstandard gives
// exactly what they write with deflate, so an older manager gets the
// bundle it would have got from a client of its own version. Each file is
// read as installing reads it (its window, its declared size, its
// CRC-32), so a damaged entry is an error naming it and w holds a partial
// archive. The reader Open was given must still be open.
func (b *Bundle) WriteDeflated(w io.Writer) error {
	zw := newZipWriter(w)
	for _, f := range b.zr.File {
		switch {
		case strings.HasSuffix(f.Name, "/"):
			h := &zip.FileHeader{Name: f.Name, Method: zip.Store, Modified: f.Modified, Comment: f.Comment}
			h.SetMode(f.Mode())
			if _, err := zw.CreateHeader(h); err != nil {
				return err
			}
		case f.Method == zipZstd:
			h := &zip.FileHeader{Name: f.Name, Method: zip.Deflate, Modified: f.Modified, Comment: f.Comment}
			h.SetMode(f.Mode())
			fw, err := zw.CreateHeader(h)
			if err != nil {
				return err
			}
			rc, err := openEntry(f)
			if err != nil {
				return err
			}
			err = copyEntry(f, rc, struct{ io.Writer }{fw})
			rc.Close()
			if err != nil {
				return err
			}
		default:
			if err := zw.Copy(f); err != nil {
				return fmt.Errorf("entry %s: %w", describe(f.Name), err)
			}
		}
	}
	return zw.Close()
}
