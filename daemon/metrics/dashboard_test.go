package metrics

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"testing"

	"github.com/gridmgr/gridmgr/node/p2p"
	"github.com/gridmgr/gridmgr/node/p2p/events"
	"github.com/gridmgr/gridmgr/wire"
)

// exported gathers the registry of a manager whose every source answers
// (relations, reservations, traffic, the bus, an application), so that
// every family this package can export is there: name → type (GAUGE,
// HISTOGRAM, …).
func exported(t *testing.T) map[string]string {
	t.Helper()
	m := New("gm", "test")
	m.SetSource(Source{
		Status: func(context.Context) (*wire.StatusReply, error) {
			return &wire.StatusReply{Relations: []*wire.RelationInfo{{
				Name: "up", Role: wire.Role_ROLE_SUPERIOR, State: wire.RelationState_RELATION_STATE_UP, RttUs: 500}}}, nil
		},
		Reservations: func(context.Context) (*wire.ReservationsReply, error) {
			return &wire.ReservationsReply{Live: 1, Usage: []*wire.Usage{{Kind: "cpus", Capacity: 4, Used: 1}}}, nil
		},
		Traffic: func() []p2p.Traffic { return []p2p.Traffic{{Protocol: string(p2p.MeshProtocol)}} },
		Bus:     func() events.Stats { return events.Stats{} },
		Apps: func() []*wire.AppInstance {
			return []*wire.AppInstance{{App: "hello", State: "running", CpuSeconds: 1, MemBytes: 1 << 20}}
		},
	})
	m.Commit(0)
	fams, err := m.Reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range fams {
		out[f.GetName()] = f.GetType().String()
	}
	return out
}

// configs/grafana-dashboard.json is valid JSON whose queries name only
// families a manager exports, each panel's targets have distinct refIds,
// and an override by query names one of its panel's targets.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../configs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Overrides []struct {
					Matcher struct {
						ID      string `json:"id"`
						Options any    `json:"options"`
					} `json:"matcher"`
				} `json:"overrides"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr  string `json:"expr"`
				RefID string `json:"refId"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("configs/grafana-dashboard.json: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("configs/grafana-dashboard.json has no panels")
	}
	fams := exported(t)
	series := regexp.MustCompile(`\bgridmgr_[a-z_]+`)
	suffix := regexp.MustCompile(`_(bucket|sum|count)$`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q is empty or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			for _, name := range series.FindAllString(tg.Expr, -1) {
				if _, ok := fams[name]; ok {
					continue
				}
				if base := suffix.ReplaceAllString(name, ""); fams[base] == "HISTOGRAM" {
					continue
				}
				t.Errorf("panel %q queries %s, which a manager does not export", p.Title, name)
			}
		}
		for _, o := range p.FieldConfig.Overrides {
			if o.Matcher.ID != "byFrameRefID" {
				continue
			}
			if ref, _ := o.Matcher.Options.(string); !refs[ref] {
				t.Errorf("panel %q overrides query %v, which it does not have", p.Title, o.Matcher.Options)
			}
		}
	}
}
