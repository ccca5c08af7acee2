package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridmgr/gridmgr/daemon"
	"github.com/gridmgr/gridmgr/node"
)

// The attributes set at runtime round-trip through attributes.json with
// their types; a damaged file is an error naming it, and no file is none.
func TestAttributesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), daemon.AttributesFile)
	if sa, err := daemon.ReadAttributes(p); sa != nil || err != nil {
		t.Fatalf("no file: %v, %v", sa, err)
	}
	in := &node.SavedAttributes{Set: map[string]string{"zone": `"eu-2"`, "rack": "12", "tags": `["ssd", "10g"]`}, Unset: []string{"gpu"}}
	if err := daemon.WriteAttributes(p, in); err != nil {
		t.Fatal(err)
	}
	out, err := daemon.ReadAttributes(p)
	if err != nil || out.Set["rack"] != "12" || out.Set["zone"] != `"eu-2"` || len(out.Unset) != 1 {
		t.Fatalf("read back %+v, %v", out, err)
	}
	os.WriteFile(p, []byte(`{"version": 1, "set": {"zone": 3}}`), 0o600)
	if _, err := daemon.ReadAttributes(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("damaged file: %v", err)
	}
}
