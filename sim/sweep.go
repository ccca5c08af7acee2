package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// QuickOptions are the numbers of the common scenario that
// `gridmgr sim --managers N` runs without a file.
type QuickOptions struct {
	Managers int
	Fanout   int
	Shape    string
	Kill     float64 // percent killed at once after the query
	Regions  int     // 0 or 1: one region (racks only)
	Seed     uint64
	Rest     time.Duration
}

// Quick is the common scenario: build the tree, one whole-grid query
// from a leaf, kill a percent of the managers at random and wait until
// the tree has healed, then measure the grid at rest.
func Quick(o QuickOptions) *Scenario {
	sc := &Scenario{Name: fmt.Sprintf("the common case (%s tree, fan-out %d, %d region(s))", o.Shape, o.Fanout, max(o.Regions, 1)), Seed: o.Seed,
		Grid: Grid{Managers: o.Managers, Fanout: o.Fanout, Shape: o.Shape}}
	for i := range o.Regions {
		sc.Network.Regions = append(sc.Network.Regions, fmt.Sprintf("r%d", i+1))
	}
	sc.Actions = []Action{
		{Do: "settle"},
		{Do: "query", From: "leaf", Requirement: "true", Want: MaxManagers, Up: 255, Down: 255, Label: "whole-grid query"},
	}
	if o.Kill > 0 {
		sc.Actions = append(sc.Actions, Action{Do: "kill", Percent: o.Kill, Label: "random kill"})
	}
	if o.Rest > 0 {
		sc.Actions = append(sc.Actions, Action{Do: "rest", For: Duration(o.Rest)})
	}
	sc.Defaults()
	return sc
}

// Sweepable are the values a sweep may vary.
var Sweepable = []string{"managers", "percent"}

// Vary returns a copy of sc with param set to v: "managers" is the grid's
// size, "percent" the percent of every kill and churn action.
func Vary(sc *Scenario, param string, v float64) (*Scenario, error) {
	c := *sc
	c.Actions = append([]Action(nil), sc.Actions...)
	switch param {
	case "managers":
		if v < 1 || v > MaxManagers || v != float64(int(v)) {
			return nil, fmt.Errorf("managers must be a whole number between 1 and %d, got %v", MaxManagers, v)
		}
		c.Grid.Managers = int(v)
		c.Name = fmt.Sprintf("%s (%d managers)", sc.Name, int(v))
	case "percent":
		if v < 0 || v > 100 {
			return nil, fmt.Errorf("percent must be between 0 and 100, got %v", v)
		}
		n := 0
		for i := range c.Actions {
			if c.Actions[i].Do == "kill" && c.Actions[i].Percent > 0 || c.Actions[i].Do == "churn" {
				c.Actions[i].Percent = v
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("the scenario has no kill by percent and no churn to vary")
		}
	default:
		return nil, fmt.Errorf("cannot sweep %q: sweepable are %s", param, strings.Join(Sweepable, ", "))
	}
	return &c, nil
}

// ParseSweep reads "managers=1000,10000,100000".
func ParseSweep(s string) (param string, values []float64, err error) {
	param, list, ok := strings.Cut(s, "=")
	if !ok || list == "" {
		return "", nil, fmt.Errorf("write the sweep as PARAM=V1,V2,... (e.g. managers=1000,10000), got %q", s)
	}
	found := false
	for _, p := range Sweepable {
		found = found || p == param
	}
	if !found {
		return "", nil, fmt.Errorf("cannot sweep %q: sweepable are %s", param, strings.Join(Sweepable, ", "))
	}
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		f = strings.ReplaceAll(f, "_", "")
		mult := 1.0
		switch {
		case strings.HasSuffix(f, "k"):
			mult, f = 1e3, strings.TrimSuffix(f, "k")
		case strings.HasSuffix(f, "M"):
			mult, f = 1e6, strings.TrimSuffix(f, "M")
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return "", nil, fmt.Errorf("sweep value %q is not a number", f)
		}
		values = append(values, v*mult)
	}
	if len(values) > 20 {
		return "", nil, fmt.Errorf("at most 20 sweep values, got %d", len(values))
	}
	return param, values, nil
}

// WriteSweepCSV writes every point's figures, each line led by the value
// swept.
func WriteSweepCSV(w io.Writer, param string, points []SweepPoint) error {
	cw := csv.NewWriter(w)
	cw.Write(append([]string{param}, csvHeader...))
	for _, p := range points {
		for _, f := range p.Figures {
			cw.Write(append([]string{num(p.X)}, csvRow(f)...))
		}
	}
	cw.Flush()
	return cw.Error()
}
