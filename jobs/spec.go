package jobs

import (
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gridmgr/gridmgr/deploy"
	"github.com/gridmgr/gridmgr/internal/lazyre"
	"github.com/gridmgr/gridmgr/query"
	"github.com/gridmgr/gridmgr/wire"
)

// Bounds of a JobSpec, checked by the submit manager (CheckSpec) whatever
// the client checked.
const (
	MaxArgs      = deploy.MaxStartArgs
	MaxArgBytes  = deploy.MaxStartBytes // args and env together
	MaxEnv       = deploy.MaxStartEnv
	MaxFiles     = 1000 // inputs, and outputs, per job
	MaxRuntimeMs = uint64(MaxRuntime / time.Millisecond)
	MaxPathLen   = 1024
	MaxOutputDir = 4096
	// MaxInputBytes bounds one input file: inputs travel in one message
	// each (larger data belongs in the program's directory, which is
	// sent once per host as a bundle).
	MaxInputBytes = 3 << 20
	maxAttrs      = 32
	maxAttrKey    = 64
	maxAttrValue  = 256
	maxNameLength = 63
)

var (
	sha256RE = lazyre.New(`^[0-9a-f]{64}$`)
	dirRE    = lazyre.New(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}$`)
)

// CheckPath says what is wrong with a path a job names inside a directory
// of its instance (an input or an output), or nil: relative, clean, no
// "..", valid UTF-8, bounded.
func CheckPath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case len(p) > MaxPathLen:
		return fmt.Errorf("path is %d bytes; the limit is %d", len(p), MaxPathLen)
	case !utf8.ValidString(p) || strings.ContainsAny(p, "\x00\\"):
		return fmt.Errorf("path %q has bytes that are not allowed (invalid UTF-8, NUL or backslash)", p)
	case path.IsAbs(p):
		return fmt.Errorf("path %q is absolute; write it relative to the job's directory", p)
	case path.Clean(p) != p || p == ".":
		return fmt.Errorf("path %q is not clean (write %q)", p, path.Clean(p))
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path %q leaves its directory", p)
	}
	return nil
}

// CheckSpec says what is wrong with a job as the wire carries it, or nil.
func CheckSpec(s *wire.JobSpec) error {
	if s == nil {
		return fmt.Errorf("no job")
	}
	if !nameRE.MatchString(s.Name) {
		return fmt.Errorf("name %q: lower-case letters, digits and '-', starting with a letter, at most %d", s.Name, maxNameLength)
	}
	if !nameRE.MatchString(s.App) {
		return fmt.Errorf("app %q is not an application name", s.App)
	}
	if s.Count < 1 || s.Count > MaxCount || s.Index >= s.Count {
		return fmt.Errorf("index %d of count %d: count must be 1 to %d and index below it", s.Index, s.Count, MaxCount)
	}
	if !sha256RE.MatchString(s.BundleSha256) {
		return fmt.Errorf("bundle_sha256 %q is not a sha256 in hex", s.BundleSha256)
	}
	if len(s.Args) > MaxArgs {
		return fmt.Errorf("%d args; the limit is %d", len(s.Args), MaxArgs)
	}
	n := 0
	for i, a := range s.Args {
		n += len(a)
		if !utf8.ValidString(a) || strings.ContainsRune(a, 0) {
			return fmt.Errorf("args[%d] is not valid UTF-8 or holds a NUL", i)
		}
	}
	if n := wordsSize(s.Args, s.Env); n > MaxArgBytes {
		return fmt.Errorf("args and env are %d bytes together; the limit is %d", n, MaxArgBytes)
	}
	if len(s.Env) > MaxEnv {
		return fmt.Errorf("%d env variables; the limit is %d", len(s.Env), MaxEnv)
	}
	for k, v := range s.Env {
		if !envRE.MatchString(k) || deploy.ReservedEnv(k) {
			return fmt.Errorf("env name %q: upper-case letters, digits and '_', not starting with a digit, and not one the manager sets", k)
		}
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) || len(v) > MaxArgBytes {
			return fmt.Errorf("env %s: not valid UTF-8, holds a NUL or is too long", k)
		}
	}
	if s.Cpus < 0 || s.Cpus > 1<<16 || s.Mem < 0 || s.Disk < 0 {
		return fmt.Errorf("cpus %d, memory %d, disk %d: none may be negative (cpus at most 65536)", s.Cpus, s.Mem, s.Disk)
	}
	for _, t := range s.Tokens {
		if t.Kind == "" || len(t.Kind) > 64 || t.N <= 0 {
			return fmt.Errorf("token %q %d: a kind of at most 64 bytes and a positive amount", t.Kind, t.N)
		}
	}
	if s.RuntimeMs == 0 || s.RuntimeMs > MaxRuntimeMs {
		return fmt.Errorf("runtime %d ms: more than 0 and at most 7 days", s.RuntimeMs)
	}
	if s.Requirement != "" {
		if _, err := query.Compile(query.Requirement, s.Requirement); err != nil {
			return fmt.Errorf("requirement: %v", err)
		}
	}
	if s.Rank != "" {
		if _, err := query.Compile(query.Rank, s.Rank); err != nil {
			return fmt.Errorf("rank: %v", err)
		}
	}
	if !dirRE.MatchString(s.InDir) || !dirRE.MatchString(s.OutDir) || s.InDir == s.OutDir {
		return fmt.Errorf("in_dir %q and out_dir %q: two different plain names", s.InDir, s.OutDir)
	}
	if len(s.Inputs) > MaxFiles || len(s.Outputs) > MaxFiles {
		return fmt.Errorf("%d inputs and %d outputs; the limit is %d each", len(s.Inputs), len(s.Outputs), MaxFiles)
	}
	seen := map[string]bool{}
	for i, f := range s.Inputs {
		if err := CheckPath(f.Path); err != nil {
			return fmt.Errorf("inputs[%d]: %v", i, err)
		}
		if !sha256RE.MatchString(f.Sha256) || f.Size < 0 {
			return fmt.Errorf("inputs[%d] %s: sha256 %q is not a sha256 in hex, or its size is negative", i, f.Path, f.Sha256)
		}
		if seen[f.Path] {
			return fmt.Errorf("inputs[%d]: %s is named twice", i, f.Path)
		}
		if f.Size > MaxInputBytes {
			return fmt.Errorf("inputs[%d]: %s is %d bytes; an input may be at most %d (3 MiB): put larger data in the program's directory, which is sent once per host", i, f.Path, f.Size, MaxInputBytes)
		}
		seen[f.Path] = true
	}
	clear(seen)
	for i, p := range s.Outputs {
		if err := CheckPath(p); err != nil {
			return fmt.Errorf("outputs[%d]: %v", i, err)
		}
		if p == "stdout" || p == "stderr" || seen[p] {
			return fmt.Errorf("outputs[%d]: %s is named twice, or is stdout or stderr (those always come back)", i, p)
		}
		seen[p] = true
	}
	if s.MaxRetries > MaxRetries {
		return fmt.Errorf("max_retries %d: at most %d", s.MaxRetries, MaxRetries)
	}
	if len(s.SuccessExitCodes) > 256 {
		return fmt.Errorf("%d success_exit_codes; at most 256", len(s.SuccessExitCodes))
	}
	for _, c := range s.SuccessExitCodes {
		if c < 0 || c > 255 {
			return fmt.Errorf("success exit code %d: 0 to 255", c)
		}
	}
	if s.BeginUnixMs < 0 || s.DeadlineUnixMs < 0 || (s.DeadlineUnixMs > 0 && s.DeadlineUnixMs < s.BeginUnixMs) {
		return fmt.Errorf("begin %d and deadline %d: not negative, and the deadline not before the begin", s.BeginUnixMs, s.DeadlineUnixMs)
	}
	if s.Priority < -1000 || s.Priority > 1000 {
		return fmt.Errorf("priority %d: -1000 to 1000", s.Priority)
	}
	if s.LostAfterMs != 0 && s.LostAfterMs < 10000 {
		return fmt.Errorf("lost_after %d ms: at least 10 s", s.LostAfterMs)
	}
	if len(s.OutputDir) > MaxOutputDir || !utf8.ValidString(s.OutputDir) {
		return fmt.Errorf("output_dir: not valid UTF-8 or longer than %d bytes", MaxOutputDir)
	}
	if len(s.Attrs) > maxAttrs {
		return fmt.Errorf("%d attrs; the limit is %d", len(s.Attrs), maxAttrs)
	}
	for k, v := range s.Attrs {
		if k == "" || len(k) > maxAttrKey || len(v) > maxAttrValue {
			return fmt.Errorf("attr %q: keys of 1 to %d bytes, values up to %d", k, maxAttrKey, maxAttrValue)
		}
	}
	return nil
}
