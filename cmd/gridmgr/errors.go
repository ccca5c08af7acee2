package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/gridmgr/gridmgr/client"
	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/internal/text"
	"github.com/gridmgr/gridmgr/node/render"
	"github.com/gridmgr/gridmgr/wire"
)

// plainError is err's text for a user: sentinels in plain words
// (client.PlainWords, and the daemon's data dir lock), the same key never
// twice in a row ("policy: policy: 1:8: ..." says it once),
// and the times a manager's message names in the form and zone of the
// listings (render.Message).
func plainError(err error) string {
	msg := err.Error()
	if errors.Is(err, client.ErrClosed) {
		// What follows is the transport's account ("stream reset: ...
		// connection reset by peer"): it says nothing more to a user.
		if i := strings.Index(msg, client.ErrClosed.Error()); i >= 0 {
			if errors.Is(err, client.ErrLimit) {
				return msg[:i] + "the manager refused this client's stream by one of its resource limits " +
					"(client streams from one peer id, or in all, were full) before reading the request. " + limitAdvice()
			}
			return msg[:i] + "the manager closed the connection before answering (did it stop?)"
		}
	}
	if errors.Is(err, client.ErrLimit) {
		// Refused by a limit at another manager than the one dialled
		// (a reservation's owner): the refusal names the limit.
		return sayKeysOnce(msg) + ". " + limitAdvice()
	}
	msg = client.PlainWords(err)
	if errors.Is(err, daemon.ErrDataDirInUse) {
		msg = strings.ReplaceAll(msg, daemon.ErrDataDirInUse.Error(), "data dir in use")
	}
	return render.Message(sayKeysOnce(msg), time.Now())
}

// sayKeysOnce drops a "key: " that repeats the one just before it, as
// when a caller prefixes the name of an expression to an error that
// already starts with it.
func sayKeysOnce(msg string) string {
	for _, key := range []string{"requirement", "rank", "policy"} {
		for strings.Contains(msg, key+": "+key+": ") {
			msg = strings.ReplaceAll(msg, key+": "+key+": ", key+": ")
		}
	}
	return msg
}

// dialErr says why a manager could not be reached, without the dialer's
// internals.
func dialErr(addr string, timeout time.Duration, err error) error {
	why := ""
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		why = fmt.Sprintf("no answer within %s (--timeout)", text.FormatDuration(timeout))
	case errors.Is(err, syscall.ECONNREFUSED):
		why = "connection refused: no manager listens there (is it running?)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		why = "no route to the host"
	case strings.Contains(err.Error(), "peer id mismatch"):
		why = "a different manager (another peer id) answers at that address"
	case strings.Contains(err.Error(), "private network"), strings.Contains(err.Error(), "pnet"):
		why = "the grid's pre-shared key does not match (--psk)"
	default:
		// The dialer's text, on one line, without its prefixes.
		why = err.Error()
		if i := strings.LastIndex(why, "failed to dial"); i >= 0 {
			why = why[i:]
		}
		why = strings.Join(strings.Fields(why), " ")
	}
	return fmt.Errorf("cannot reach the manager at %s: %s", addr, why)
}

// codeWords is an error code in words: CODE_NOT_FOUND → "not found".
func codeWords(c wire.ErrorReply_Code) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(c.String(), "CODE_")), "_", " ")
}
