package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/relations"
)

func TestRelationsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, daemon.RelationsFile)
	if sv, err := daemon.ReadRelations(path); sv != nil || err != nil {
		t.Fatalf("missing file: %v, %v; want nil, nil", sv, err)
	}
	const peer = "12D3KooWQ4qwPRmkkWeAMpEhufgtsxeEkxLdMZGXQRB249SkJYjv"
	want := &relations.Saved{Version: relations.SavedVersion, Manager: "gm160", Configured: []relations.SavedPeer{},
		Superiors: []relations.SavedSuperior{{Peer: peer, Name: "gm152", Addrs: []string{"/ip4/127.0.0.1/tcp/4152"}, Origin: "adopted"}}}
	for i := 0; i < 3; i++ { // replacing works, and leaves no temporary files
		if err := daemon.WriteRelations(path, want); err != nil {
			t.Fatal(err)
		}
	}
	got, err := daemon.ReadRelations(path)
	if err != nil || string(got.Marshal()) != string(want.Marshal()) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("dir holds %d entries, want only the file", len(ents))
	}
	// A corrupt file is an error naming the file and the field, not a
	// silent fallback.
	bad := strings.Replace(string(want.Marshal()), `"adopted"`, `"borrowed"`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = daemon.ReadRelations(path)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `superiors[0].origin: unknown origin "borrowed"`) {
		t.Fatalf("corrupt file: %v", err)
	}
}
