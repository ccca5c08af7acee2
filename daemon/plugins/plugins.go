package plugins

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"
)

// Prefix is prepended to a command name to form the plugin's file name.
const Prefix = "gridmgr-cmd-"

// Defaults used when the corresponding Runner field is zero or negative.
const (
	DefaultTimeout   = 10 * time.Second
	DefaultMaxOutput = 64 << 10
)

// maxNameLen is the longest valid plugin name.
const maxNameLen = 64

// drainGrace bounds how long Run waits for the output pipe to reach EOF
// after the plugin has exited and its process group has been killed. Only a
// descendant that left the group (setsid, setpgid) while keeping the pipe
// open can make it matter.
const drainGrace = 500 * time.Millisecond

// pluginPATH is the PATH given to plugins.
const pluginPATH = "/usr/local/bin:/usr/bin:/bin"

// Errors returned by Lookup and Run. They are wrapped with details (the
// name or path concerned); test for them with errors.Is.
var (
	ErrNoDir         = errors.New("plugins_dir is not set")
	ErrBadName       = errors.New("invalid plugin name")
	ErrNotFound      = errors.New("no such plugin")
	ErrNotExecutable = errors.New("plugin is not an executable regular file")
	ErrTimeout       = errors.New("plugin timed out")
)

// Runner looks up and runs plugins in one directory.
type Runner struct {
	// Dir is the plugins directory (plugins_dir). Empty means plugins are
	// disabled. A relative Dir is made absolute against the current
	// working directory at each call.
	Dir string
	// Timeout bounds one run of a plugin; DefaultTimeout (10s) if <= 0.
	Timeout time.Duration
	// MaxOutput is how many bytes of combined stdout+stderr are kept;
	// DefaultMaxOutput (64 KiB) if <= 0.
	MaxOutput int
}

// Result is the outcome of a plugin run.
type Result struct {
	// Output is the combined stdout and stderr, valid UTF-8 (invalid bytes
	// replaced with U+FFFD). If the plugin wrote more than MaxOutput bytes,
	// the first MaxOutput bytes are kept (cut back to a rune boundary) and
	// followed by a final line "… (output truncated at N bytes)".
	Output string
	// ExitCode is the plugin's exit status: 0 for success, the status it
	// exited with, 128+signal if it was killed by a signal it did not get
	// from Run, and -1 if Run killed it (timeout or cancellation).
	ExitCode int
	// Duration is the wall-clock time from start to the end of clean-up.
	Duration time.Duration
	// TimedOut reports that the plugin was killed because it ran longer
	// than the Runner's Timeout.
	TimedOut bool
}

// ValidName reports whether name can be a plugin name: 1 to 64 characters
// from [a-z0-9-], not starting with '-'. Such a name contains no path
// separator and no dot.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > maxNameLen || name[0] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Lookup returns the absolute path of the plugin for command name. It
// checks the file system afresh on every call. Symbolic links are followed;
// the final target must be a regular file with at least one execute bit.
//
// Errors: ErrNoDir if Dir is empty, ErrBadName if !ValidName(name),
// ErrNotFound (naming the full path) if there is no such file, and
// ErrNotExecutable if it is not a regular file or not executable. Other
// file-system errors (permission denied, symlink loop) are returned
// wrapped as they are.
func (r Runner) Lookup(name string) (path string, err error) {
	_, path, err = r.lookup(name)
	return path, err
}

// lookup is Lookup also returning the absolute plugins directory.
func (r Runner) lookup(name string) (dir, path string, err error) {
	if r.Dir == "" {
		return "", "", ErrNoDir
	}
	if !ValidName(name) {
		return "", "", fmt.Errorf("%w: %q (want 1-%d of [a-z0-9-], not starting with '-')", ErrBadName, name, maxNameLen)
	}
	dir, err = filepath.Abs(r.Dir)
	if err != nil {
		return "", "", fmt.Errorf("plugins: %w", err)
	}
	path = filepath.Join(dir, Prefix+name)
	fi, err := os.Stat(path) // follows symlinks
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return "", "", fmt.Errorf("%w: %s", ErrNotFound, path)
		}
		return "", "", fmt.Errorf("plugins: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("%w: %s is not a regular file", ErrNotExecutable, path)
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return "", "", fmt.Errorf("%w: %s has no execute permission", ErrNotExecutable, path)
	}
	return dir, path, nil
}

// List returns the names of the valid, executable plugins in Dir, sorted.
// It returns nil if Dir is unset or cannot be read.
func (r Runner) List() []string {
	if r.Dir == "" {
		return nil
	}
	entries, err := os.ReadDir(r.Dir)
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), Prefix)
		if !ok || !ValidName(name) {
			continue
		}
		if _, err := r.Lookup(name); err == nil {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func (r Runner) limits() (time.Duration, int) {
	timeout, maxOut := r.Timeout, r.MaxOutput
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if maxOut <= 0 {
		maxOut = DefaultMaxOutput
	}
	return timeout, maxOut
}

// Run looks up the plugin for command name and runs it with args as
// argv[1:] and stdin as its standard input, waiting for it to finish, time
// out (Runner.Timeout) or for ctx to be done. It blocks for up to the
// timeout plus a fraction of a second, so it must be called from a
// goroutine that may block.
//
// A non-zero exit status is not an error (see Result.ExitCode). Run
// returns an error if the lookup fails (see Lookup), if the plugin cannot
// be started, if it times out (ErrTimeout, wrapped with the limit; the
// Result holds what it wrote before) or if ctx is done first (the error
// wraps ctx.Err()). In every case the plugin's process group has been
// killed by the time Run returns.
func (r Runner) Run(ctx context.Context, name string, args []string, stdin []byte) (Result, error) {
	dir, path, err := r.lookup(name)
	if err != nil {
		return Result{}, err
	}
	timeout, maxOut := r.limits()

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Pipes are managed here rather than by os/exec so that Wait returns as
	// soon as the plugin exits, whoever else holds the other ends.
	inR, inW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("plugins: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return Result{}, fmt.Errorf("plugins: %w", err)
	}

	cmd := exec.CommandContext(runCtx, path, args...)
	cmd.Args[0] = path
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + pluginPATH, "GRIDMGR_PLUGIN=" + name}
	cmd.Stdin = inR
	cmd.Stdout = outW
	cmd.Stderr = outW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var killed atomic.Bool
	cmd.Cancel = func() error {
		killed.Store(true)
		killGroup(cmd.Process.Pid)
		return nil
	}

	start := time.Now()
	if err := cmd.Start(); err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return Result{}, fmt.Errorf("plugins: start %s: %w", path, err)
	}
	// The child has its own copies now.
	inR.Close()
	outW.Close()
	pid := cmd.Process.Pid

	go func() {
		// Errors (EPIPE if the plugin does not read everything, ErrClosed
		// after clean-up) do not matter.
		_, _ = inW.Write(stdin)
		_ = inW.Close()
	}()

	out := &capBuffer{max: maxOut}
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, 32<<10)
		for {
			n, err := outR.Read(buf)
			out.write(buf[:n])
			if err != nil {
				return
			}
		}
	}()

	// Kill whatever is left of the group once the plugin has exited. Where
	// possible this happens while the plugin is still an unreaped zombie,
	// so its pid (the group id) cannot have been reused.
	if waitExited(pid) {
		killGroup(pid)
		_ = cmd.Wait()
	} else {
		_ = cmd.Wait()
		killGroup(pid)
	}
	_ = inW.Close() // unblock the stdin writer if it is still stuck

	select {
	case <-outDone:
	case <-time.After(drainGrace):
		_ = outR.SetReadDeadline(time.Now())
		<-outDone
	}
	_ = outR.Close()

	res := Result{
		Output:   out.String(),
		Duration: time.Since(start),
		ExitCode: -1,
	}
	ps := cmd.ProcessState
	if ps == nil {
		return res, fmt.Errorf("plugins: wait for %s: no process state", path)
	}
	if ps.Exited() {
		// Exited on its own, even if a kill raced with its exit.
		res.ExitCode = ps.ExitCode()
		return res, nil
	}
	if killed.Load() {
		if ctx.Err() != nil {
			return res, fmt.Errorf("plugins: %s: %w", name, context.Cause(ctx))
		}
		res.TimedOut = true
		return res, fmt.Errorf("%w: %s after %v", ErrTimeout, name, timeout)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.ExitCode = 128 + int(ws.Signal())
	}
	return res, nil
}

// killGroup sends SIGKILL to process group pgid, ignoring errors (ESRCH
// when the group is already empty).
func killGroup(pgid int) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// capBuffer keeps the first max bytes written to it and counts the rest.
// It is written by one goroutine and read after that goroutine is done.
type capBuffer struct {
	max   int
	buf   []byte
	total int64
}

func (b *capBuffer) write(p []byte) {
	b.total += int64(len(p))
	if room := b.max - len(b.buf); room > 0 {
		if len(p) > room {
			p = p[:room]
		}
		b.buf = append(b.buf, p...)
	}
}

// String returns the kept output as valid UTF-8, with the truncation
// marker line if bytes were dropped.
func (b *capBuffer) String() string {
	kept := b.buf
	truncated := b.total > int64(len(kept))
	if truncated {
		kept = trimPartialRune(kept)
	}
	s := strings.ToValidUTF8(string(kept), string(utf8.RuneError))
	if truncated {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += fmt.Sprintf("… (output truncated at %d bytes)", b.max)
	}
	return s
}

// trimPartialRune drops an incomplete UTF-8 sequence cut off at the end of
// b, so that truncation does not produce a spurious U+FFFD.
func trimPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			break
		}
	}
	return b
}
