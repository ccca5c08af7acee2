package query

import (
	"strconv"
	"testing"
)

// benchValues is a typical offer: everything known, a few attributes.
func benchValues() *Values {
	return &Values{
		Name: "m1", Hostname: "m1.example", OS: "linux", Arch: "amd64",
		CPUs: 16, CPUsFree: 12, CPUUtil: 0.25,
		Mem: 64 * GiB, MemFree: 48 * GiB, NetMbps: 1000,
		Attrs: map[string]any{"zone": "eu-1", "rack": int64(7), "tags": []any{"gpu", "ssd"}},
	}
}

// BenchmarkEval measures Match and Score on a compiled program.
func BenchmarkEval(b *testing.B) {
	v := benchValues()
	v.Prepare()
	raw := benchValues() // Attrs converted on each access
	r := &Request{User: "alice", CPUs: 4, Mem: 8 * GiB}
	for _, c := range []struct {
		name string
		kind Kind
		src  string
		raw  bool
	}{
		{"requirement", Requirement, `cpus_free >= 4 && mem_free >= 8 * GiB && cpu_util < 0.5`, false},
		{"attrs", Requirement, `attrs.zone == "eu-1" && "ssd" in attrs.tags`, false},
		{"attrs-unprepared", Requirement, `attrs.zone == "eu-1" && "ssd" in attrs.tags`, true},
		{"policy", Policy, `request.user in ["alice", "bob"] && request.cpus <= cpus_free`, false},
		{"rank", Rank, `mem_free`, false},
	} {
		p, err := Compile(c.kind, c.src)
		if err != nil {
			b.Fatal(err)
		}
		v := v
		if c.raw {
			v = raw
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			if c.kind == Rank {
				for b.Loop() {
					if _, ok := p.Score(v, r); !ok {
						b.Fatal("score not ok")
					}
				}
				return
			}
			for b.Loop() {
				if !p.Match(v, r) {
					b.Fatal("no match")
				}
			}
		})
	}
}

// BenchmarkCompile measures Compile of a new source each time (a cache miss).
func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		src := `cpus_free >= ` + strconv.Itoa(i) + ` && mem_free >= 8 * GiB && cpu_util < 0.5`
		if _, err := Compile(Requirement, src); err != nil {
			b.Fatal(err)
		}
	}
}
