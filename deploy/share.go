package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
)

// Shares keeps what several instances share on a host, each under a key,
// with the instances that use it and the uid it was given:
//
//   - "class:NAME": an application class's shared setup (the manifest's
//     [shared]), which the first instance of the class on a host does and
//     the last one to go undoes — the patent's rule for changes only the
//     first application of a class needs — run as a uid of the class's
//     own, so that no tenant owns what others use;
//   - "reservation:ID": a reservation's uid, which all its instances run
//     as, given back with the last of them.
//
// The counts are durable: each change is written (atomically, synced)
// before Acquire or Release returns. Shares is safe for concurrent use:
// a uid is allocated and recorded in one step. The caller records the use in the
// instance's journal before Acquire, so that undoing the instance
// releases it whatever a crash interrupted, and does (or undoes) the
// shared setup after Acquire says first (or Release says last).
type Shares struct {
	path string
	mu   sync.Mutex
	m    map[string]*share
}

type share struct {
	UID   uint32   `json:"uid,omitempty"`
	Users []string `json:"users"` // instances, sorted
}

// ClassKey and ReservationKey name the shares of a class and of a
// reservation.
func ClassKey(class string) string     { return "class:" + class }
func ReservationKey(res string) string { return "reservation:" + res }

// OpenShares reads the shares at path (none if it is absent). A
// classes.json beside it, from a version without uids, is taken over.
func OpenShares(path string) (*Shares, error) {
	s := &Shares{path: path, m: map[string]*share{}}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		old := filepath.Join(filepath.Dir(path), "classes.json")
		if data, err := os.ReadFile(old); err == nil {
			var classes map[string][]string
			if err := json.Unmarshal(data, &classes); err != nil {
				return nil, fmt.Errorf("%s: %w", old, err)
			}
			for c, users := range classes {
				s.m[ClassKey(c)] = &share{Users: users}
			}
			if err := s.save(s.m); err != nil {
				return nil, err
			}
			_ = os.Remove(old)
		}
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, &s.m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Acquire makes instance a user of key and reports whether it is the
// first; the first gets a uid from alloc (given the uids in use; nil
// alloc: no uid). Acquiring twice is one use.
func (s *Shares) Acquire(key, instance string, alloc func(used map[uint32]bool) (uint32, error)) (uid uint32, first bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.m[key]
	if cur != nil && slices.Contains(cur.Users, instance) {
		return cur.UID, false, nil
	}
	next := &share{}
	if cur != nil {
		next.UID, next.Users = cur.UID, slices.Clone(cur.Users)
	} else if alloc != nil {
		if next.UID, err = alloc(s.uids()); err != nil {
			return 0, false, err
		}
	}
	next.Users = append(next.Users, instance)
	slices.Sort(next.Users)
	if err := s.put(key, next); err != nil {
		return 0, false, err
	}
	return next.UID, cur == nil, nil
}

// AcquireAll is Acquire of each of keys in turn (each first one's uid
// from alloc, given the uids in use, those of the keys before it
// included), saved once: it returns their uids and whether each was the
// first. On an error nothing is acquired.
func (s *Shares) AcquireAll(keys []string, instance string, alloc func(used map[uint32]bool) (uint32, error)) (uids []uint32, first []bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]*share, len(s.m)+len(keys))
	for k, v := range s.m {
		m[k] = v
	}
	changed := false
	for _, key := range keys {
		cur := m[key]
		if cur != nil && slices.Contains(cur.Users, instance) {
			uids, first = append(uids, cur.UID), append(first, false)
			continue
		}
		next := &share{}
		if cur != nil {
			next.UID, next.Users = cur.UID, slices.Clone(cur.Users)
		} else if alloc != nil {
			used := map[uint32]bool{}
			for _, sh := range m {
				if sh.UID != 0 {
					used[sh.UID] = true
				}
			}
			if next.UID, err = alloc(used); err != nil {
				return nil, nil, err
			}
		}
		next.Users = append(next.Users, instance)
		slices.Sort(next.Users)
		m[key] = next
		changed = true
		uids, first = append(uids, next.UID), append(first, cur == nil)
	}
	if changed {
		if err := s.save(m); err != nil {
			return nil, nil, err
		}
		s.m = m
	}
	return uids, first, nil
}

// Release ends instance's use of key and reports whether it was the
// last (so the shared setup is to be undone, and the uid is free again).
// Releasing an instance that does not use the key changes nothing and is
// not the last.
func (s *Shares) Release(key, instance string) (last bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.m[key]
	if cur == nil {
		return false, nil
	}
	i := slices.Index(cur.Users, instance)
	if i < 0 {
		return false, nil
	}
	next := &share{UID: cur.UID, Users: slices.Delete(slices.Clone(cur.Users), i, i+1)}
	if len(next.Users) == 0 {
		next = nil
	}
	if err := s.put(key, next); err != nil {
		return false, err
	}
	return next == nil, nil
}

// Users are the instances using key, sorted.
func (s *Shares) Users(key string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.m[key]; cur != nil {
		return slices.Clone(cur.Users)
	}
	return nil
}

// UID is the uid of key (0: none, or no such share).
func (s *Shares) UID(key string) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.m[key]; cur != nil {
		return cur.UID
	}
	return 0
}

// UIDs are the uids given out.
func (s *Shares) UIDs() map[uint32]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uids()
}

func (s *Shares) uids() map[uint32]bool {
	out := map[uint32]bool{}
	for _, sh := range s.m {
		if sh.UID != 0 {
			out[sh.UID] = true
		}
	}
	return out
}

// put replaces (nil: deletes) key and saves.
func (s *Shares) put(key string, sh *share) error {
	m := make(map[string]*share, len(s.m)+1)
	for k, v := range s.m {
		m[k] = v
	}
	if sh == nil {
		delete(m, key)
	} else {
		m[key] = sh
	}
	if err := s.save(m); err != nil {
		return err
	}
	s.m = m
	return nil
}

func (s *Shares) save(m map[string]*share) error {
	if len(m) == 0 {
		// Nothing shared: no file, as before the first install.
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return atomicfile.SyncDir(filepath.Dir(s.path))
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteVia(s.path, s.path+".tmp", bytes.NewReader(append(data, '\n')), 0o600)
}
