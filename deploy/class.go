package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
)

// Classes keeps, for each application class, the instances that use its
// shared setup (the manifest's [shared]): the first instance of a class
// on a host does that setup, and the last one to go undoes it — the
// patent's rule for changes only the first application of a class needs.
// The counts are durable: each change is written (atomically, synced)
// before Acquire or Release returns.
//
// The caller must do the shared setup through a Journal of the class's
// own, after Acquire says first, and undo that journal after Release says
// last. A crash between the two leaves a reference whose instance's
// removal (on restart) releases it.
type Classes struct {
	path string
	refs map[string][]string // class → instances, sorted
}

// OpenClasses reads the reference counts at path (none if it is absent).
func OpenClasses(path string) (*Classes, error) {
	c := &Classes{path: path, refs: map[string][]string{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &c.refs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Acquire makes instance a user of class and reports whether it is the
// first (so the shared setup is to be done). Acquiring twice is one use.
func (c *Classes) Acquire(class, instance string) (first bool, err error) {
	users := c.refs[class]
	if slices.Contains(users, instance) {
		return false, nil
	}
	next := append(slices.Clone(users), instance)
	slices.Sort(next)
	if err := c.save(class, next); err != nil {
		return false, err
	}
	return len(users) == 0, nil
}

// Release ends instance's use of class and reports whether it was the
// last (so the shared setup is to be undone). Releasing an instance that
// does not use the class changes nothing and is not the last.
func (c *Classes) Release(class, instance string) (last bool, err error) {
	users := c.refs[class]
	i := slices.Index(users, instance)
	if i < 0 {
		return false, nil
	}
	next := slices.Delete(slices.Clone(users), i, i+1)
	if err := c.save(class, next); err != nil {
		return false, err
	}
	return len(next) == 0, nil
}

// Users are the instances using class, sorted.
func (c *Classes) Users(class string) []string { return slices.Clone(c.refs[class]) }

func (c *Classes) save(class string, users []string) error {
	refs := make(map[string][]string, len(c.refs)+1)
	for k, v := range c.refs {
		refs[k] = v
	}
	if len(users) == 0 {
		delete(refs, class)
	} else {
		refs[class] = users
	}
	if len(refs) == 0 {
		// No class in use: no file, as before the first install.
		if err := os.Remove(c.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		c.refs = refs
		return nil
	}
	data, err := json.MarshalIndent(refs, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteVia(c.path, c.path+".tmp", bytes.NewReader(append(data, '\n')), 0o600); err != nil {
		return err
	}
	c.refs = refs
	return nil
}
