#!/usr/bin/env bash
# Slurm and gridmgr side by side on this machine (see README.md beside this
# file): runs slurm.sh, then gridmgr.sh if the gridmgr binary has the `job`
# command, and prints ratios gridmgr/slurm for the rates (_per_s) and
# slurm/gridmgr for the times (_s), so that above 1 always means gridmgr
# did better.
#
#   bench/jobs/compare.sh [--gridmgr BIN] [--jobs N] [--runs R]
#                         [--slurm-args "ARGS"] [--from FILE]
#
#   --gridmgr BIN   the gridmgr binary (default: built from this tree with
#                   go build into a temporary directory)
#   --jobs, --runs  passed to both halves (defaults: theirs, 1000 and 20)
#   --slurm-args    more arguments for slurm.sh (default "--both": with and
#                   without cgroups)
#   --from FILE     run nothing: read summary lines from FILE (the output of
#                   earlier runs) and print the ratios
#
# The summary lines go to stdout as they come: redirect to keep them, and
# give the file back with --from to print the ratios again.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=""
common=()
slurm_args="--both"
from=""
while [ $# -gt 0 ]; do
	case $1 in
	--gridmgr) bin=$2; shift ;;
	--gridmgr=*) bin=${1#*=} ;;
	--jobs | --runs) common+=("$1" "$2"); shift ;;
	--jobs=* | --runs=*) common+=("$1") ;;
	--slurm-args) slurm_args=$2; shift ;;
	--slurm-args=*) slurm_args=${1#*=} ;;
	--from) from=$2; shift ;;
	--from=*) from=${1#*=} ;;
	-h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done

work=$(mktemp -d /tmp/gridmgr-bench-jobs.XXXXXX)
trap 'rm -rf "$work"' EXIT
out=$work/lines

if [ -n "$from" ]; then
	cp "$from" "$out"
else
	# shellcheck disable=SC2086 # slurm_args is a list of words
	"$here/slurm.sh" ${common[@]+"${common[@]}"} $slurm_args | tee -a "$out"

	if [ -z "$bin" ]; then
		echo "compare.sh: building gridmgr (the first build takes minutes)" >&2
		(cd "$top" && go build -o "$work/gridmgr" ./cmd/gridmgr)
		bin=$work/gridmgr
	fi
	if "$bin" job --help >/dev/null 2>&1; then
		"$here/gridmgr.sh" --gridmgr "$bin" ${common[@]+"${common[@]}"} | tee -a "$out"
	else
		echo "compare.sh: $bin has no 'job' command: gridmgr half skipped" >&2
	fi
fi

# Pair every gridmgr line with every slurm line of the same kind (same
# submit=..., or neither has one) and print, for each metric both have,
# the two values and the ratio. Generic over the fields: a numeric field
# named *_per_s is a rate, any other numeric *_s a time; the rest label.
awk '
function kind(line,   n, f, i) {
	n = split(line, f, " ")
	for (i = 2; i <= n; i++) if (f[i] ~ /^submit=/) return f[i]
	return "-"
}
function label(line,   n, f, i, s) {
	n = split(line, f, " "); s = ""
	for (i = 2; i <= n; i++) if (f[i] ~ /^(mode|jobs|latency_runs)=/) s = s (s ? "," : "") f[i]
	return s
}
$1 == "slurm" || $1 == "gridmgr" { line[$1, ++cnt[$1]] = $0 }
END {
	if (!cnt["slurm"]) { print "compare.sh: no slurm summary lines" > "/dev/stderr"; exit 1 }
	if (!cnt["gridmgr"]) {
		print "no gridmgr figures yet: ratios need gridmgr.sh lines (gridmgr half: not yet available)"
		exit 0
	}
	printf "%-12s %-20s %-34s %-34s %10s %10s %8s\n", "kind", "metric", "gridmgr", "slurm", "gridmgr", "slurm", "ratio"
	for (g = 1; g <= cnt["gridmgr"]; g++) for (s = 1; s <= cnt["slurm"]; s++) {
		gl = line["gridmgr", g]; sl = line["slurm", s]
		if (kind(gl) != kind(sl)) continue
		delete gv
		n = split(gl, f, " ")
		for (i = 2; i <= n; i++) { split(f[i], kv, "="); gv[kv[1]] = kv[2] }
		n = split(sl, f, " ")
		for (i = 2; i <= n; i++) {
			split(f[i], kv, "="); k = kv[1]; v = kv[2]
			if (!(k in gv) || k !~ /_s$/ || v !~ /^[0-9.]+$/ || gv[k] !~ /^[0-9.]+$/) continue
			if (k ~ /_per_s$/) r = (v > 0) ? sprintf("%.2f", gv[k] / v) : "inf"
			else r = (gv[k] > 0) ? sprintf("%.2f", v / gv[k]) : "inf"
			printf "%-12s %-20s %-34s %-34s %10s %10s %8s\n", kind(sl), k, label(gl), label(sl), gv[k], v, r
		}
	}
	print "ratio: gridmgr/slurm for *_per_s, slurm/gridmgr for other *_s: above 1, gridmgr did better"
}' "$out"
