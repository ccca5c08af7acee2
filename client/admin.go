package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/gridmgr/gridmgr/node/admincmd"
	"github.com/gridmgr/gridmgr/wire"
)

// MaxAdminWords is the most words (the command's name included) an admin
// command may have.
const MaxAdminWords = admincmd.MaxWords

// ErrNoAdminCommand: an AdminSpec with no words.
var ErrNoAdminCommand = errors.New("client: no admin command")

// AdminSpec is one admin command as a program states it: its words, and
// whether every manager of the grid runs it.
type AdminSpec struct {
	// Words are the command and its arguments. One word is sent as it is:
	// a whole command string ("remove-inferior gm162"), which the manager
	// splits shell-like; several are joined so that each stays one word
	// (admincmd.Join).
	Words []string
	// All sends the command to every manager of the grid through this
	// one (AdminAll), within ctx's deadline.
	All bool
	// Each, with All, is called once for every manager that answered
	// (not for a repeated answer of one reached twice): first as answers
	// arrive, then for those found only in the final reply, sorted by
	// name. n counts them from 1. Calls never overlap; Each must not
	// block for long (it runs on the session's reading goroutine until
	// the final reply).
	Each func(n int, r *wire.AdminReply)
}

// Command is the command string the spec sends.
func (s AdminSpec) Command() string {
	if len(s.Words) == 1 {
		return s.Words[0]
	}
	return admincmd.Join(s.Words)
}

// AdminResult is what an admin command came back with.
type AdminResult struct {
	// Reply is the manager's reply as sent: one manager's answer, or with
	// All every answer (Replies) and the managers that did not answer in
	// time (Missing).
	Reply *wire.AdminReply
	// With All: Answered is how many managers answered (each once),
	// Failed how many answers are failures (Ok false).
	Answered, Failed int
}

// RunAdmin sends the admin command s states and waits for its answer (or,
// with All, for every manager's). A command that ran but failed comes back
// in the result (Reply.Ok false, Reply.Code; with All, Failed); err is for
// an empty spec (ErrNoAdminCommand) and transport failures.
func (c *Client) RunAdmin(ctx context.Context, s AdminSpec) (*AdminResult, error) {
	if len(s.Words) == 0 {
		return nil, ErrNoAdminCommand
	}
	if !s.All {
		rep, err := c.Admin(ctx, s.Command())
		if err != nil {
			return nil, err
		}
		res := &AdminResult{Reply: rep, Answered: 1}
		if !rep.Ok {
			res.Failed = 1
		}
		return res, nil
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	show := func(r *wire.AdminReply) {
		if seen[r.Peer] || r.Duplicate {
			return
		}
		seen[r.Peer] = true
		if s.Each != nil {
			s.Each(len(seen), r)
		}
	}
	rep, err := c.AdminAll(ctx, s.Command(), func(p *wire.AdminReply) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range p.Replies {
			show(r)
		}
	})
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	replies := slices.Clone(rep.Replies)
	slices.SortFunc(replies, func(a, b *wire.AdminReply) int { return strings.Compare(a.Name, b.Name) })
	res := &AdminResult{Reply: rep}
	for _, r := range replies {
		show(r)
		if !r.Ok {
			res.Failed++
		}
	}
	res.Answered = len(seen)
	return res, nil
}
