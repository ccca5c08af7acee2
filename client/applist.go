package client

import (
	"context"
	"slices"

	"github.com/gridmgr/gridmgr/wire"
)

// AppsListing is what ListApps found.
type AppsListing struct {
	// Instances of every manager that answered, in the order searched.
	Instances []*wire.AppInstance
	// Manager is the name of the manager dialled; Root says it has no
	// superior (its subtree is the whole grid).
	Manager string
	Root    bool
	// From are the managers whose trees were walked (the roots, for
	// AppsGrid); Searched the managers asked, in order, each once.
	From, Searched []string
	// Missing are the managers (or subtrees) that did not answer.
	Missing []AppsMissing
}

// AppsMissing is a manager that did not answer ListApps, or one whose
// subtree could not be read (Subtree).
type AppsMissing struct {
	Name    string
	Subtree bool
	Err     error
}

// ListApps lists the application instances of the subtree of r's entry
// manager (it and every manager below it) or, with grid, of the whole
// grid (every manager below the root(s) above it, each root in a mesh): it
// reads the trees and asks every manager in them (through r, so with the
// entry's identity), each once even in a mesh. Managers that do not
// answer are listed in Missing, not errors; the error is for the entry
// manager's status. (One manager's own list is Client.App with OP_LIST.)
func (r *Reserver) ListApps(ctx context.Context, grid bool) (*AppsListing, error) {
	cl := r.entry
	list := func(c *Client) ([]*wire.AppInstance, error) {
		rep, err := c.App(ctx, &wire.AppRequest{Op: wire.AppRequest_OP_LIST})
		if err != nil {
			return nil, err
		}
		return rep.Instances, nil
	}
	st, err := cl.Status(ctx)
	if err != nil {
		return nil, err
	}
	out := &AppsListing{Manager: st.Name, Root: len(st.Ancestors) == 0}
	// Where to start: the manager given (subtree), or the roots above it
	// (grid): the deepest ancestors first, then any ancestor (and the
	// manager itself) that no tree walked so far took in.
	type start struct {
		peer, name string
		addrs      []string
	}
	starts := []start{{peer: cl.Peer(), name: st.Name}}
	if grid {
		anc := slices.Clone(st.Ancestors)
		slices.SortStableFunc(anc, func(a, b *wire.Ancestor) int { return int(b.Depth) - int(a.Depth) })
		var above []start
		for _, a := range anc {
			above = append(above, start{peer: a.Peer, name: a.Name, addrs: a.Addrs})
		}
		starts = append(above, starts...)
	}
	at := func(peer string, addrs []string) (*Client, error) {
		if peer == cl.Peer() {
			return cl, nil
		}
		return r.Owner(ctx, peer, addrs)
	}
	listed := map[string]bool{}
	var walk func(n *wire.TreeNode)
	walk = func(n *wire.TreeNode) {
		if listed[n.Peer] {
			return // a mesh: below two superiors
		}
		listed[n.Peer] = true
		out.Searched = append(out.Searched, n.Name)
		owner, err := at(n.Peer, n.Addrs)
		var ins []*wire.AppInstance
		if err == nil {
			ins, err = list(owner)
		}
		if err != nil {
			out.Missing = append(out.Missing, AppsMissing{Name: n.Name, Err: err})
		} else {
			out.Instances = append(out.Instances, ins...)
		}
		for _, ch := range n.Children {
			walk(ch)
		}
	}
	for _, s := range starts {
		if listed[s.peer] {
			continue
		}
		tree, err := func() (*wire.TreeNode, error) {
			owner, err := at(s.peer, s.addrs)
			if err != nil {
				return nil, err
			}
			return owner.Tree(ctx, 0)
		}()
		if err != nil {
			out.Missing = append(out.Missing, AppsMissing{Name: s.name, Subtree: true, Err: err})
			continue
		}
		out.From = append(out.From, s.name)
		walk(tree)
	}
	return out, nil
}
