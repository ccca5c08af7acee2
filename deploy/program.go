// PackProgram: a bundle for a plain program (one executable file, or a
// directory with an executable in it) with a manifest made for it, so a
// job needs no app.toml of its own.

package deploy

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"
)

// ProgramBundle says what PackProgram packs.
type ProgramBundle struct {
	Name string // the application's name: [a-z][a-z0-9-]*, at most 63
	// Source is the program: an executable file, or a directory.
	Source string
	// Executable is, for a directory, the program's path inside it
	// (slash-separated, relative; placed and run at that path, mode 0755
	// whatever its mode in Source). For a file it must be empty or the
	// file's base name: the file is placed and run as bin/NAME.
	Executable string
	Version    string // free text, default "1"
	Network    string // "host" (default) or "none" (loopback only)
	InDir      string // where `app put` writes; default "in"
	OutDir     string // where `app get` reads; default "out"
	Limits     Limits // bound the files read (count and bytes); zero: Open's defaults
	// Zstd compresses the files with Zstandard, as PackOptions.Zstd
	// does; false deflates them.
	Zstd bool
}

// programPrefix is where the program's files are in the bundle (so none
// of them can be taken for its app.toml); each is placed in the instance
// at its path under it.
const programPrefix = "files/"

// PackProgram makes a bundle for a plain program: the bytes of a zip
// that Open accepts, the same bytes for the same inputs (so its sha256
// names it). Its app.toml installs every file of Source at its path
// relative to Source (a file: bin/NAME) with mode 0755 if any execute
// bit is set, else 0644, makes InDir, OutDir and Source's empty
// directories, and runs the executable (in the instance's directory,
// its working directory) with what the start adds: [run] args = true,
// env = true, restart = "never"; data.in = [InDir], data.out = [OutDir].
//
// Source is read through an os.Root, so nothing outside it is read. It
// refuses, naming the path: a symbolic link anywhere (Source itself
// too), anything but regular files and directories, a name that is not
// valid UTF-8 or holds a control character or a backslash, a file where
// InDir or OutDir (or a directory above them) must be, more files than a
// manifest may place (1000), and more files or bytes than opts.Limits.
func PackProgram(opts ProgramBundle) ([]byte, error) {
	o := opts
	if o.Version == "" {
		o.Version = "1"
	}
	if o.Network == "" {
		o.Network = "host"
	}
	if o.InDir == "" {
		o.InDir = "in"
	}
	if o.OutDir == "" {
		o.OutDir = "out"
	}
	lim := o.Limits.withDefaults()
	fail := func(format string, a ...any) ([]byte, error) {
		return nil, fmt.Errorf("packing program %s: "+format, append([]any{describe(o.Source)}, a...)...)
	}
	switch {
	case !nameRE.MatchString(o.Name):
		return fail("name %s: write lower-case letters, digits and '-', starting with a letter, at most 63", describe(o.Name))
	case o.Network != "host" && o.Network != "none":
		return fail("network %s: host (the host's network) or none (loopback only)", describe(o.Network))
	case o.Source == "":
		return fail("no source: name the program's file or directory")
	case len(o.Version) > 64 || !utf8.ValidString(o.Version) || strings.ContainsFunc(o.Version, isControl):
		return fail("version %s: at most 64 printable characters", describe(o.Version))
	}
	for _, d := range []struct{ key, p string }{{"in directory", o.InDir}, {"out directory", o.OutDir}} {
		if err := checkPath(d.p); err != "" {
			return fail("%s %s: %s", d.key, describe(d.p), err)
		}
		if !utf8.ValidString(d.p) {
			return fail("%s %s: not valid UTF-8", d.key, describe(d.p))
		}
	}
	st, err := os.Lstat(o.Source)
	if err != nil {
		return fail("%v", err)
	}
	var (
		root  *os.Root
		files []programFile // sorted by their path in the instance
		dirs  []string      // empty directories
		exe   string        // its path in the instance
	)
	switch {
	case st.Mode()&fs.ModeSymlink != 0:
		return fail("it is a symbolic link: name the file or directory it points to")
	case st.Mode().IsRegular():
		base := filepath.Base(o.Source)
		if o.Executable != "" && o.Executable != base {
			return fail("executable %s: for a single file, leave it empty or give the file's name %q (it is run as bin/%s)", describe(o.Executable), base, o.Name)
		}
		if root, err = os.OpenRoot(filepath.Dir(o.Source)); err != nil {
			return fail("%v", err)
		}
		exe = "bin/" + o.Name
		files = []programFile{{src: base, to: exe, size: st.Size()}}
	case st.IsDir():
		if o.Executable == "" {
			return fail("no executable: name the program inside the directory (its path relative to it)")
		}
		if err := checkPath(o.Executable); err != "" {
			return fail("executable %s: %s", describe(o.Executable), err)
		}
		if !utf8.ValidString(o.Executable) {
			return fail("executable %s: not valid UTF-8", describe(o.Executable))
		}
		if root, err = os.OpenRoot(o.Source); err != nil {
			return fail("%v", err)
		}
		exe = o.Executable
		if files, dirs, err = walkProgram(root, lim); err != nil {
			root.Close()
			return fail("%v", err)
		}
		if !slices.ContainsFunc(files, func(f programFile) bool { return f.to == exe }) {
			root.Close()
			return fail("executable %s is not a file in it", describe(exe))
		}
	default:
		return fail("it is not a regular file or a directory")
	}
	defer root.Close()
	for _, f := range files {
		for _, d := range []string{o.InDir, o.OutDir} {
			if f.to == d || strings.HasPrefix(d, f.to+"/") {
				return fail("%s is a file where the install makes the directory %s: rename it, or choose another in/out directory", describe(f.to), d)
			}
		}
	}
	if len(files) > maxList {
		return fail("%d files: a manifest places at most %d (pack fewer, larger files: an archive the program unpacks)", len(files), maxList)
	}
	allDirs := []string{o.InDir}
	if o.OutDir != o.InDir {
		allDirs = append(allDirs, o.OutDir)
	}
	allDirs = append(allDirs, dirs...)
	if len(allDirs) > maxList {
		return fail("%d empty directories: a manifest makes at most %d", len(dirs), maxList)
	}

	var toml bytes.Buffer
	fmt.Fprintf(&toml, "# Made by gridmgr (deploy.PackProgram) for a plain program: it runs with\n# what its start adds (arguments, environment) in its instance's directory.\n")
	fmt.Fprintf(&toml, "name = %s\nversion = %s\nnetwork = %s\n\n[install]\nfiles = [\n", tomlString(o.Name), tomlString(o.Version), tomlString(o.Network))
	for i := range files {
		f := &files[i]
		if f.to == exe {
			f.exec = true
		}
		mode := "0644"
		if f.exec {
			mode = "0755"
		}
		fmt.Fprintf(&toml, "  { from = %s, to = %s, mode = %q },\n", tomlString(programPrefix+f.to), tomlString(f.to), mode)
	}
	fmt.Fprintf(&toml, "]\ndirs = %s\n\n", tomlList(allDirs))
	cmd := exe
	if !strings.Contains(cmd, "/") {
		cmd = "./" + cmd // a word without '/' would be looked for in PATH
	}
	fmt.Fprintf(&toml, "[run]\ncommand = %s\nargs = true\nenv = true\nrestart = \"never\"\n\n", tomlList([]string{cmd}))
	fmt.Fprintf(&toml, "[data]\nin = %s\nout = %s\n", tomlList([]string{o.InDir}), tomlList([]string{o.OutDir}))
	if _, err := Parse(ManifestName, toml.Bytes()); err != nil {
		return fail("the manifest made for it is not valid: %v", err)
	}

	var buf bytes.Buffer
	zw := newZipWriter(&buf)
	method := zip.Deflate
	if o.Zstd {
		method = zipZstd
	}
	entry := func(name string, mode fs.FileMode) (io.Writer, error) {
		h := &zip.FileHeader{Name: name, Method: method, Modified: fixedTime}
		h.SetMode(mode)
		return zw.CreateHeader(h)
	}
	// Entries sorted by name, as Pack writes them: app.toml sorts before
	// files/.
	w, err := entry(ManifestName, 0o644)
	if err == nil {
		_, err = w.Write(toml.Bytes())
	}
	if err != nil {
		return fail("%v", err)
	}
	var total int64
	for _, f := range files {
		mode := fs.FileMode(0o644)
		if f.exec {
			mode = 0o755
		}
		w, err := entry(programPrefix+f.to, mode)
		if err != nil {
			return fail("%v", err)
		}
		n, err := copyProgramFile(root, f, w, lim.MaxExpanded-total)
		if err != nil {
			return fail("%v", err)
		}
		total += n
	}
	if err := zw.Close(); err != nil {
		return fail("%v", err)
	}
	if _, err := Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), o.Limits); err != nil {
		return fail("%v", err)
	}
	return buf.Bytes(), nil
}

// programFile is one file of a program's source.
type programFile struct {
	src  string // its path under the root read (slash-separated)
	to   string // its path in the instance
	size int64  // as first seen
	exec bool   // placed 0755
}

// walkProgram lists the files and the empty directories under root,
// refusing links, special files and names a manifest cannot hold.
func walkProgram(root *os.Root, lim Limits) (files []programFile, empty []string, err error) {
	var total int64
	count := 0
	children := map[string]int{}
	var dirs []string
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if count++; count > lim.MaxFiles {
			return fmt.Errorf("more than %d files and directories (the bundle limit)", lim.MaxFiles)
		}
		if !utf8.ValidString(p) {
			return fmt.Errorf("%s: the name is not valid UTF-8", describe(p))
		}
		if msg := checkPath(p); msg != "" {
			return fmt.Errorf("%s: %s", describe(p), msg)
		}
		children[path.Dir(p)]++
		switch t := d.Type(); {
		case t.IsDir():
			dirs = append(dirs, p)
		case t.IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if total += info.Size(); total > lim.MaxExpanded {
				return fmt.Errorf("more than %d bytes in all (the bundle limit), at %s", lim.MaxExpanded, describe(p))
			}
			files = append(files, programFile{src: p, to: p, size: info.Size(), exec: info.Mode().Perm()&0o111 != 0})
		case t&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link: a bundle holds only files and directories (copy the file in its place)", describe(p))
		default:
			return fmt.Errorf("%s is not a regular file or a directory (%s)", describe(p), t.Type())
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, d := range dirs {
		if children[d] == 0 {
			empty = append(empty, d)
		}
	}
	slices.SortFunc(files, func(a, b programFile) int { return strings.Compare(a.to, b.to) })
	return files, empty, nil
}

// copyProgramFile copies f from root to w, at most limit bytes: opened
// without following a link and without blocking (a file replaced by a
// link or a pipe since it was listed is refused).
func copyProgramFile(root *os.Root, f programFile, w io.Writer, limit int64) (int64, error) {
	r, err := root.OpenFile(f.src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return 0, fmt.Errorf("%s is a symbolic link: a bundle holds only files and directories", describe(f.src))
		}
		return 0, err
	}
	defer r.Close()
	st, err := r.Stat()
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file any more", describe(f.src))
	}
	n, err := io.Copy(w, io.LimitReader(r, limit+1))
	if err != nil {
		return n, fmt.Errorf("reading %s: %w", describe(f.src), err)
	}
	if n > limit {
		return n, fmt.Errorf("more than the bundle limit of bytes in all, at %s (it grew while read)", describe(f.src))
	}
	return n, nil
}

// tomlString is s as a TOML basic string. s is valid UTF-8 with no
// control character (checked before): Go's quoting of it is TOML's.
func tomlString(s string) string { return strconv.Quote(s) }

func tomlList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
