package sim

import (
	"bytes"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestBig(t *testing.T) {
	f := os.Getenv("SIM_FILE")
	if f == "" {
		t.Skip()
	}
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Parse(f, data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc, Options{Progress: os.Stderr, Wall: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	WriteTable(&b, res.Figures)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("\n%s\nsteps %d virtual %v wall %v violations %v sys %d MiB", b.String(), res.Steps, res.Virtual, res.Wall, res.Violations, ms.Sys>>20)
}
