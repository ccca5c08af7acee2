package jobs

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gridmgr/gridmgr/internal/tomlpos"
)

// Limits of a workflow file.
const (
	MaxFlowNodes = 10000   // nodes of one workflow
	MaxFlowSize  = 4 << 20 // bytes of a workflow file
	MaxAfter     = 256     // nodes one node comes after
	maxCommand   = 64      // words of a pre or post command
)

// Flow is a checked workflow file (flow.toml): nodes, each a job (a job
// file, or the job's keys written in the node's table) that runs once
// every node it comes after has completed. docs/jobs.md ("Workflows")
// is the user's reference.
type Flow struct {
	File  string
	Name  string
	Nodes []*FlowNode // parents before children; among equals by name
}

// FlowNode is one node of a Flow.
type FlowNode struct {
	Name  string
	After []string // sorted
	Line  int      // its table's line
	// JobFile is the job file it runs, relative to the workflow file's
	// directory (slash-separated, clean), read by the caller: Job is nil
	// then. JobLine is the line of its job key.
	JobFile string
	JobLine int
	// Job is its job written inline: paths in it are relative to the
	// workflow file's directory.
	Job *Description
	// Retries, when not -1, replaces its job's max_retries.
	Retries int
	// Pre and Post are commands run at the submit manager before the
	// node's job and after it (whatever it did; its exit decides the
	// node): a program relative to the workflow file's directory, then
	// its arguments. Nil: none.
	Pre, Post []string
}

// Err is a problem with n found by the caller (its job file missing, not
// a job file), as FILE:LINE: KEY: msg.
func (f *Flow) Err(n *FlowNode, msg string) error {
	line, key := n.Line, "nodes."+n.Name
	if n.JobFile != "" {
		line, key = n.JobLine, key+".job"
	}
	return tomlpos.Errors{{File: f.File, Line: line, Key: key, Msg: msg}}
}

// flowKeys is flow.toml as decoded.
type flowKeys struct {
	Name  string              `toml:"name"`
	Nodes map[string]nodeKeys `toml:"nodes"`
}

type nodeKeys struct {
	fileKeys
	After   []string `toml:"after"`
	Job     string   `toml:"job"`
	Retries int64    `toml:"retries"`
	Pre     []string `toml:"pre"`
	Post    []string `toml:"post"`
}

// nodeOwn are a node's keys that are not a job's.
var nodeOwn = []string{"after", "job", "retries", "pre", "post"}

// ParseFlow reads and checks a workflow file submitted at now, strictly
// as Parse reads a job file: every problem at once as FILE:LINE: KEY.
// Unknown nodes in after, a node after itself and cycles are errors. A
// node's job file is not read here (the package does no I/O): the
// caller reads each FlowNode.JobFile, parses it with ParseAt and reports
// a problem with Flow.Err.
func ParseFlow(file string, data []byte, now time.Time) (*Flow, error) {
	var fk flowKeys
	c, err := newChecker(file, data, MaxFlowSize, &fk, now)
	if err != nil {
		return nil, err
	}
	doc, failed, top := c.doc, c.failed, c.given
	f := &Flow{File: file, Name: fk.Name}
	if _, ok := top["name"]; !ok {
		f.Name = strings.TrimSuffix(lastPart(file), ".toml")
		if !nameRE.MatchString(f.Name) {
			c.add(0, "name", "missing, and the file's name %s is not a workflow name: set name (lower-case letters, digits and '-', starting with a letter, at most 63)", describe(f.Name))
		}
	} else if !nameRE.MatchString(f.Name) {
		c.add(c.line("name"), "name", "%s: write lower-case letters, digits and '-', starting with a letter, at most 63", describe(f.Name))
	}
	given, _ := top["nodes"].(map[string]any)
	switch {
	case failed["nodes"]:
	case len(fk.Nodes) == 0:
		c.add(0, "nodes", "no nodes: write a table [nodes.NAME] for each, with job = \"FILE\" or the job's keys")
	case len(fk.Nodes) > MaxFlowNodes:
		c.add(c.doc.Table("nodes"), "nodes", "at most %d nodes, got %d", MaxFlowNodes, len(fk.Nodes))
	}
	nodesStart := c.doc.Table("nodes")
	byName := map[string]*FlowNode{}
	for _, name := range slices.Sorted(maps.Keys(fk.Nodes)) {
		if len(fk.Nodes) > MaxFlowNodes {
			break
		}
		nk := fk.Nodes[name]
		table := "nodes." + name
		line := doc.Table(table)
		if line == 0 {
			line = doc.Key(nodesStart, name)
		}
		nc := &checker{file: file, doc: doc, errs: c.errs, failed: failed, now: now, table: table, start: line, defName: name}
		nc.given, _ = given[name].(map[string]any)
		n := &FlowNode{Name: name, Line: line, Retries: -1}
		byName[name] = n
		if !nameRE.MatchString(name) {
			nc.add(line, "", "%s is not a node name: lower-case letters, digits and '-', starting with a letter, at most 63", describe(name))
		}
		// after
		seen := map[string]bool{}
		if len(nk.After) > MaxAfter {
			nc.add(nc.line("after"), "after", "at most %d nodes, got %d", MaxAfter, len(nk.After))
		}
		for _, a := range nk.After {
			switch {
			case a == name:
				nc.add(nc.line("after"), "after", "a node cannot come after itself")
			case seen[a]:
				nc.add(nc.line("after"), "after", "%s is listed twice", describe(a))
			default:
				n.After = append(n.After, a)
			}
			seen[a] = true
		}
		slices.Sort(n.After)
		// retries
		if nc.has("retries") {
			if nk.Retries < 0 || nk.Retries > MaxRetries {
				nc.add(nc.line("retries"), "retries", "must be between 0 and %d, got %d", MaxRetries, nk.Retries)
			} else {
				n.Retries = int(nk.Retries)
			}
		}
		// pre, post
		n.Pre = nc.command("pre", nk.Pre)
		n.Post = nc.command("post", nk.Post)
		// job: a file, or inline keys
		inline := false
		for k := range nc.given {
			if !slices.Contains(nodeOwn, k) {
				inline = true
			}
		}
		switch {
		case nc.has("job") && inline:
			nc.add(nc.line("job"), "job", "give either job = \"FILE\" or the job's keys in the node, not both")
		case nc.has("job"):
			n.JobFile, n.JobLine = nk.Job, nc.line("job")
			if msg := checkPath(nk.Job, false); msg != "" {
				nc.add(n.JobLine, "job", "%s: %s", describe(nk.Job), strings.ReplaceAll(msg, "the job file's directory", "the workflow file's directory"))
			}
		case inline:
			n.Job = nc.check(&nk.fileKeys)
			if n.Job != nil && !now.IsZero() {
				n.Job.Resolve(now)
			}
		default:
			nc.add(line, "", "no job: write job = \"FILE\" (a job file), or the job's keys (program, args, cpus …) in this table")
		}
		c.errs = nc.errs
	}
	// unknown nodes, then cycles
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		n := byName[name]
		for _, a := range n.After {
			if byName[a] == nil {
				nc := &checker{file: file, doc: doc, errs: c.errs, failed: failed, table: "nodes." + name, start: n.Line}
				nc.add(nc.line("after"), "after", "%s is not a node of this workflow%s", describe(a), closest(a, byName))
				c.errs = nc.errs
			}
		}
	}
	if len(c.errs) == 0 {
		order, cycle := topo(byName)
		if cycle != nil {
			n := byName[cycle[0]]
			nc := &checker{file: file, doc: doc, errs: c.errs, failed: failed, table: "nodes." + n.Name, start: n.Line}
			nc.add(nc.line("after"), "after", "a cycle: %s (a workflow may not loop; split the work into nodes that end)", strings.Join(append(cycle, cycle[0]), " → "))
			c.errs = nc.errs
		}
		f.Nodes = order
	}
	if err := c.result(); err != nil {
		return nil, err
	}
	return f, nil
}

// command checks a pre or post command: a program inside the workflow's
// directory, then arguments.
func (c *checker) command(key string, words []string) []string {
	if !c.has(key) {
		return nil
	}
	line := c.line(key)
	switch {
	case len(words) == 0:
		c.add(line, key, "empty: give the program and its arguments, e.g. [\"scripts/check.sh\", \"-v\"], or leave the key out")
		return nil
	case len(words) > maxCommand:
		c.add(line, key, "at most %d words, got %d", maxCommand, len(words))
		return nil
	}
	if msg := checkPath(words[0], false); msg != "" {
		c.add(line, key, "%s: %s", describe(words[0]), strings.ReplaceAll(msg, "the job file's directory", "the workflow file's directory"))
	}
	for i, w := range words[1:] {
		if strings.ContainsRune(w, 0) || len(w) > maxValue {
			c.add(line, fmt.Sprintf("%s[%d]", key, i+2), "holds a NUL byte or is longer than %d bytes", maxValue)
		}
	}
	return words
}

func closest(name string, nodes map[string]*FlowNode) string {
	for _, n := range slices.Sorted(maps.Keys(nodes)) {
		if strings.EqualFold(n, name) || strings.HasPrefix(n, name) || strings.HasPrefix(name, n) {
			return fmt.Sprintf(" (did you mean %q?)", n)
		}
	}
	return ""
}

func lastPart(file string) string {
	file = strings.ReplaceAll(file, "\\", "/")
	return file[strings.LastIndexByte(file, '/')+1:]
}

// topo orders nodes parents first (Kahn's algorithm, ties by name), or
// returns a cycle (its nodes in order) when there is one.
func topo(nodes map[string]*FlowNode) ([]*FlowNode, []string) {
	indeg := map[string]int{}
	children := map[string][]string{}
	for name, n := range nodes {
		indeg[name] += 0
		for _, a := range n.After {
			indeg[name]++
			children[a] = append(children[a], name)
		}
	}
	var ready []string
	for name, d := range indeg {
		if d == 0 {
			ready = append(ready, name)
		}
	}
	slices.Sort(ready)
	var order []*FlowNode
	for len(ready) > 0 {
		name := ready[0]
		ready = ready[1:]
		order = append(order, nodes[name])
		var next []string
		for _, ch := range children[name] {
			if indeg[ch]--; indeg[ch] == 0 {
				next = append(next, ch)
			}
		}
		slices.Sort(next)
		ready = append(ready, next...)
	}
	if len(order) == len(nodes) {
		return order, nil
	}
	// Every node left is on a cycle or after one: walk back along after
	// from one left until a node repeats.
	var start string
	for _, name := range slices.Sorted(maps.Keys(indeg)) {
		if indeg[name] > 0 {
			start = name
			break
		}
	}
	at := map[string]int{}
	var path []string
	for cur := start; ; {
		if i, ok := at[cur]; ok {
			cyc := path[i:]
			slices.Reverse(cyc) // written as "a comes before b"
			return nil, cyc
		}
		at[cur] = len(path)
		path = append(path, cur)
		for _, a := range nodes[cur].After {
			if indeg[a] > 0 {
				cur = a
				break
			}
		}
	}
}
