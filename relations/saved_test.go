package relations

import (
	"errors"
	"github.com/gridmgr/gridmgr/peeraddr"
	"reflect"
	"strings"
	"testing"
	"time"
)

func savedFixture(t *testing.T) *Saved {
	t.Helper()
	s := NewSet(peer1, "gm160")
	now := time.Unix(100, 0)
	conf := []peeraddr.PeerAddrs{{Peer: peer2, Addrs: []string{"/ip4/10.0.0.2/tcp/4001"}}}
	if _, err := s.AddSuperior(now, conf[0], true, Backoff{Initial: time.Second, Max: time.Second}); err != nil {
		t.Fatal(err)
	}
	r, err := s.AddCandidate(now, Candidate{PeerAddrs: peeraddr.PeerAddrs{Peer: peer4, Addrs: []string{"/ip4/10.0.0.4/tcp/4001"}}, Name: "gm152", Origin: FromAdoption}, peer2, now, Backoff{Initial: time.Second, Max: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.Trial = "" // adopted; sorted by peer id it is superiors[0]
	r.Ancestors = []Ancestor{{Peer: peer3, Name: "gm150", Addrs: []string{"/ip4/10.0.0.3/tcp/4001"}, Depth: 1}}
	return s.SaveSuperiors(conf)
}

func TestSavedRoundTrip(t *testing.T) {
	sv := savedFixture(t)
	got, err := ParseSaved(sv.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sv) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, sv)
	}
	if len(got.Superiors) != 2 || got.Superiors[0].Origin != "adopted" || got.Superiors[0].StandsFor != peer2 || got.Superiors[0].Ancestors[0].Name != "gm150" {
		t.Fatalf("unexpected content: %+v", got.Superiors)
	}
	if !got.SameConfigured([]peeraddr.PeerAddrs{{Peer: peer2, Addrs: []string{"/ip4/10.9.9.9/tcp/1"}}}) {
		t.Error("same configured peer with another address must count as the same")
	}
	if got.SameConfigured(nil) || got.SameConfigured([]peeraddr.PeerAddrs{{Peer: peer3}}) {
		t.Error("other configured superiors must not count as the same")
	}
}

func TestSavedCandidatesInTrialAreNotSaved(t *testing.T) {
	s := NewSet(peer1, "x")
	now := time.Unix(0, 0)
	if _, err := s.AddCandidate(now, Candidate{PeerAddrs: peeraddr.PeerAddrs{Peer: peer2}}, peer3, now, Backoff{Initial: time.Second, Max: time.Second}); err != nil {
		t.Fatal(err)
	}
	if sv := s.SaveSuperiors(nil); len(sv.Superiors) != 0 {
		t.Fatalf("a candidate in trial was saved: %+v", sv.Superiors)
	}
}

func TestParseSavedErrors(t *testing.T) {
	good := string(savedFixture(t).Marshal())
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "EOF"},
		{"not json", "superiors = []", "invalid character"},
		{"unknown field", strings.Replace(good, `"manager"`, `"mangler"`, 1), `unknown field "mangler"`},
		{"version", strings.Replace(good, `"version": 1`, `"version": 2`, 1), "version: 2 is not supported"},
		{"trailing", good + "{}", "data after the JSON object"},
		{"bad peer", strings.Replace(good, `"peer": "`+peer4+`"`, `"peer": "gm152"`, 1), `superiors[0].peer: "gm152" is not a peer id`},
		{"bad origin", strings.Replace(good, `"adopted"`, `"stolen"`, 1), `superiors[0].origin: unknown origin "stolen"`},
		{"addr with p2p", strings.Replace(good, `"/ip4/10.0.0.4/tcp/4001"`, `"/ip4/10.0.0.4/tcp/4001/p2p/`+peer4+`"`, 1), "superiors[0].addrs[0]"},
		{"bad depth", strings.Replace(good, `"depth": 1`, `"depth": 0`, 1), "superiors[0].ancestors[0].depth: 0 is outside"},
		{"dup", strings.Replace(good, `"peer": "`+peer4+`"`, `"peer": "`+peer2+`"`, 1), "superiors[1].peer: same peer as superiors[0]"},
		{"huge", strings.Repeat(" ", maxSavedSize+1), "the limit is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSaved([]byte(tc.in))
			if err == nil || !errors.Is(err, ErrSaved) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrSaved containing %q", err, tc.want)
			}
		})
	}
}

// FuzzParseSaved: any bytes give a value or an ErrSaved, never a panic,
// and what parses renders and parses again to the same value.
func FuzzParseSaved(f *testing.F) {
	f.Add([]byte(`{"version":1,"manager":"x","configured":[],"superiors":[]}`))
	f.Add([]byte("{\"version\":1,\"superiors\":[{\"peer\":\"" + peer2 + "\",\"addrs\":[\"/ip4/1.2.3.4/tcp/1\"],\"origin\":\"admin\",\"ancestors\":[{\"peer\":\"" + peer3 + "\",\"addrs\":[],\"depth\":1}]}]}"))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sv, err := ParseSaved(data)
		if err != nil {
			if !errors.Is(err, ErrSaved) {
				t.Fatalf("error does not wrap ErrSaved: %v", err)
			}
			return
		}
		again, err := ParseSaved(sv.Marshal())
		if err != nil {
			t.Fatalf("rendered value does not parse: %v", err)
		}
		if !reflect.DeepEqual(normalSaved(again), normalSaved(sv)) {
			t.Fatalf("round trip changed the value:\n%+v\n%+v", again, sv)
		}
	})
}

// normalSaved treats nil and empty slices alike (JSON null vs []).
func normalSaved(sv *Saved) string { return string(sv.Marshal()) }

// Real peer ids.
const (
	peer1 = "12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
	peer2 = "12D3KooWRBy97UB99e3J6hiPesre1MZeuNQvfan4gBziswrRJsNK"
	peer3 = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
	peer4 = "12D3KooWQ4qwPRmkkWeAMpEhufgtsxeEkxLdMZGXQRB249SkJYjv"
)

// A snapshot shares its lists of addresses with the set (SaveSuperiors):
// whatever the set then does to the relation whose lists it shares — new
// addresses merged in, the superior turned inferior with others, saved
// again — must leave the snapshot as it was when taken. Each step runs on
// a fresh snapshot, while the relation still holds the shared lists.
func TestSavedSnapshotKeepsWhenTheSetChanges(t *testing.T) {
	now := time.Unix(100, 0)
	b := Backoff{Initial: time.Second, Max: time.Second}
	for _, step := range []struct {
		name string
		do   func(s *Set, conf []peeraddr.PeerAddrs)
	}{
		{"addresses merged in", func(s *Set, _ []peeraddr.PeerAddrs) {
			if _, err := s.AddSuperior(now, peeraddr.PeerAddrs{Peer: peer2, Addrs: []string{"/ip4/10.0.0.9/tcp/4001"}}, true, b); err != nil {
				t.Fatal(err)
			}
		}},
		{"turned inferior", func(s *Set, _ []peeraddr.PeerAddrs) {
			s.AddInferior(now, peer2, "gm154", []string{"/ip4/10.0.0.7/tcp/4001"})
		}},
		{"saved again", func(s *Set, conf []peeraddr.PeerAddrs) { _ = s.SaveSuperiors(conf) }},
	} {
		s := NewSet(peer1, "gm160")
		addrs := make([]string, 1, 8) // room to write in place, were anything to
		addrs[0] = "/ip4/10.0.0.2/tcp/4001"
		conf := []peeraddr.PeerAddrs{{Peer: peer2, Addrs: addrs}}
		r, err := s.AddSuperior(now, conf[0], true, b)
		if err != nil {
			t.Fatal(err)
		}
		r.Addrs = append(make([]string, 0, 8), r.Addrs...) // the set's own list, with room too
		r.Ancestors = []Ancestor{{Peer: peer3, Name: "gm150", Addrs: []string{"/ip4/10.0.0.3/tcp/4001"}, Depth: 1}}
		sv := s.SaveSuperiors(conf)
		want := string(sv.Marshal())
		step.do(s, conf)
		if got := string(sv.Marshal()); got != want {
			t.Fatalf("%s: the snapshot changed with the set:\n got %s\nwant %s", step.name, got, want)
		}
	}
}
