// Package atomicfile replaces files so that a crash leaves either the old
// content or the new, never a mix, and the replacement itself survives:
// the new content is written to a temporary file beside the target,
// synced, renamed over it, and the directory is synced.
//
// The caller must keep one writer per file at a time; the temporary
// files are beside the target, so the target's directory must be writable.
package atomicfile
