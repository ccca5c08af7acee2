package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/gridmgr/gridmgr/internal/atomicfile"
	"github.com/gridmgr/gridmgr/node"
	"github.com/gridmgr/gridmgr/relations"
)

// RelationsFile is the name, inside the data dir, of the saved superiors.
const RelationsFile = "relations.json"

// ReadRelations reads saved relations from path. A missing file is not an
// error: it returns nil (start from the properties file). A file that
// cannot be read or parsed is an error naming the file and the field.
func ReadRelations(path string) (*relations.Saved, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("saved relations: %w", err)
	}
	sv, err := relations.ParseSaved(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (fix or remove the file: the manager then starts from its properties file)", path, err)
	}
	return sv, nil
}

// WriteRelations replaces path with sv atomically: it writes a temporary
// file next to it, syncs it, renames it over path and syncs the directory,
// so a crash leaves either the old file or the new one, never a mix.
func WriteRelations(path string, sv *relations.Saved) error {
	if err := atomicfile.Write(path, bytes.NewReader(sv.Marshal()), 0o600); err != nil {
		return fmt.Errorf("save relations: %w", err)
	}
	return nil
}

// AttributesFile is the name, inside the data dir, of the attributes set
// at runtime (set/unset attribute).
const AttributesFile = "attributes.json"

// attributesJSON is the file's form: each value as TOML, so that 12, 1.5,
// "12" and [1, 2] keep their types.
type attributesJSON struct {
	Version    int                 `json:"version"`
	Set        map[string]string   `json:"set,omitempty"`
	Unset      []string            `json:"unset,omitempty"`
	Users      map[string][]string `json:"users,omitempty"`
	UnsetUsers []string            `json:"unset_users,omitempty"`
}

// ReadAttributes reads the attributes set at runtime from path; a missing
// file is none (nil).
func ReadAttributes(path string) (*node.SavedAttributes, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("saved attributes: %w", err)
	}
	var f attributesJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil || f.Version != 1 {
		if err == nil {
			err = fmt.Errorf("version %d; this gridmgr reads version 1", f.Version)
		}
		return nil, fmt.Errorf("%s: %w (fix or remove the file: the manager then uses its properties file's attributes)", path, err)
	}
	return &node.SavedAttributes{Set: f.Set, Unset: f.Unset, Users: f.Users, UnsetUsers: f.UnsetUsers}, nil
}

// WriteAttributes replaces path with sa atomically.
func WriteAttributes(path string, sa *node.SavedAttributes) error {
	data, err := json.MarshalIndent(attributesJSON{Version: 1, Set: sa.Set, Unset: sa.Unset, Users: sa.Users, UnsetUsers: sa.UnsetUsers}, "", "  ")
	if err != nil {
		return fmt.Errorf("save attributes: %w", err)
	}
	if err := atomicfile.Write(path, bytes.NewReader(append(data, '\n')), 0o600); err != nil {
		return fmt.Errorf("save attributes: %w", err)
	}
	return nil
}

// AuditFile is the name, inside the data dir, of the admin audit log.
const AuditFile = "audit.log"

// AppendAudit appends one JSON line per record to path and syncs it.
func AppendAudit(path string, recs []node.AuditRecord) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	var b []byte
	for _, r := range recs {
		line, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		b = append(append(b, line...), '\n')
	}
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}
