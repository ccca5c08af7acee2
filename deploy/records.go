// Records: what the Executor keeps of each instance (state/ID.json,
// written durably before anything is acknowledged), reading them back,
// the recovery at open (undo what a crash cut short, re-adopt what kept
// running), and the questions asked of them (ids, Bundles, BundleOf).

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
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
)

// Record is what the executor keeps of one instance.
type Record struct {
	ID          string            `json:"id"`
	App         string            `json:"app"`
	Version     string            `json:"version"`
	Class       string            `json:"class"`
	Reservation string            `json:"reservation"`
	Holder      string            `json:"holder"`
	Bundle      string            `json:"bundle"`
	Ports       map[string]uint32 `json:"ports,omitempty"`
	UID         uint32            `json:"uid,omitempty"`       // its reservation's
	ClassUID    uint32            `json:"class_uid,omitempty"` // its class's
	CPUs        int64             `json:"cpus"`
	Mem         int64             `json:"mem"`
	Disk        int64             `json:"disk"` // bytes it may hold
	Installed   time.Time         `json:"installed"`
	Changes     int               `json:"changes"`
	Started     bool              `json:"started"` // the holder asked it to run (and not to stop)
	// Held says why the manager stopped it (over its disk limit); it
	// may start again once under.
	Held string `json:"held,omitempty"`
	// Args and Env are what the last start added to the run command
	// (StartWith), as given (substituted when it runs): every restart
	// uses them.
	Args []string          `json:"args,omitempty"`
	Env  map[string]string `json:"env,omitempty"`

	m        *Manifest
	diskUsed int64 // bytes, as last measured
}

func (e *Executor) recordPath(id string) string {
	return filepath.Join(e.o.Dir, "state", id+".json")
}

// recover loads the records, undoes what has a journal and no record (an
// installation cut short, or a removal that deleted the record first),
// and re-adopts running instances.
func (e *Executor) recover() error {
	ids, err := e.host.Instances()
	if err != nil {
		return err
	}
	for _, id := range ids {
		rec, err := e.readRecord(id)
		if err != nil {
			e.log.Warn("instance record unreadable: removing the instance", "instance", id, "err", err)
		}
		if rec == nil {
			n, err := e.undo(id, e.reservationOf(id))
			if err != nil {
				return fmt.Errorf("undoing the interrupted installation of %s: %w", id, err)
			}
			e.log.Info("undid an installation that did not complete", "instance", id, "changes", n)
			continue
		}
		if n, _, err := usage(e.host.InstanceDir(id)); err == nil {
			rec.diskUsed = n // shown until the watcher measures again
		}
		e.recs[id] = rec
	}
	if e.run != nil {
		adopted, err := e.run.Adopt()
		if err != nil {
			e.log.Warn("re-adopting running applications", "err", err)
		}
		for _, id := range adopted {
			if _, ok := e.recs[id]; !ok {
				// Processes of an instance that no longer exists: stop them.
				_ = e.run.Remove(id, e.reservationOf(id))
				continue
			}
			e.log.Info("re-adopted a running application", "instance", id)
		}
	}
	return nil
}

// reservationOf is the reservation of instance RESERVATION.APP.
func (e *Executor) reservationOf(id string) string {
	if i := strings.LastIndexByte(id, '.'); i > 0 {
		return id[:i]
	}
	return id
}

func (e *Executor) readRecord(id string) (*Record, error) {
	data, err := os.ReadFile(e.recordPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	if r.ID != id {
		return nil, fmt.Errorf("record names %q", r.ID)
	}
	m, err := e.manifestOf(&r)
	if err != nil {
		return nil, err
	}
	r.m = m
	return &r, nil
}

// manifestOf reads the manifest the instance was installed from (kept in
// its state directory).
func (e *Executor) manifestOf(r *Record) (*Manifest, error) {
	p := filepath.Join(e.o.Dir, "state", r.ID+".app.toml")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return Parse(p, data)
}

func (e *Executor) writeRecord(r *Record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(e.recordPath(r.ID), bytes.NewReader(append(data, '\n')), 0o644)
}

// Bundles lists the bundles the instances use (the caller may delete
// any other).
func (e *Executor) Bundles() map[string]bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]bool{}
	for _, r := range e.recs {
		out[r.Bundle] = true
	}
	return out
}

// BundleOf is the sha256 of the bundle instance id was installed from
// ("" if there is no such instance).
func (e *Executor) BundleOf(id string) string {
	if r := e.get(id); r != nil {
		return r.Bundle
	}
	return ""
}

func (e *Executor) ids(keep func(*Record) bool) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id, r := range e.recs {
		if keep(r) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
