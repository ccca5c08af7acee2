// Package svgplot draws line plots as SVG files: a title, two labelled
// axes (the x axis linear or logarithmic), grid lines, solid or dashed
// lines with their points marked when there are few, and a legend to the
// right of the data. It is what `gridmgr sim --out` draws its figures
// with.
//
// It replaced gonum.org/v1/plot, which the simulator used for the same
// plots: that library embeds about 5 MB of fonts and parses them in a
// package init, so every gridmgr process — a manager idling on a host
// included — mapped and initialised them. An SVG leaves fonts and text
// layout to the viewer, so this package needs neither; it estimates a
// label's width from its length, which is all the layout needs.
//
// It holds no global state: a Plot is built, then written once with
// Write or Save.
package svgplot
