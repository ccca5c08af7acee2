package sim

import (
	"bytes"
	"os"
	"testing"
	"time"
)

func TestSmall(t *testing.T) {
	data, err := os.ReadFile("scenarios/small.toml")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := Parse("small.toml", data)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc, Options{Progress: os.Stderr, Wall: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	WriteTable(&b, res.Figures)
	t.Logf("\n%s\nsteps %d virtual %v wall %v violations %v", b.String(), res.Steps, res.Virtual, res.Wall, res.Violations)
}
