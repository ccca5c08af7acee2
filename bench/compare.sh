#!/bin/sh
# Compare benchmarks of two commits in the same run, so the machine's noise
# falls on both alike: each package's test binary is built at BASE and at
# NEW, then the two are run in turn ROUNDS times, and the medians and the
# ratio new÷base are printed per benchmark and metric (ns/op, B/op,
# allocs/op and the benchmark's own figures).
#
#   bench/compare.sh BASE NEW [ROUNDS] [PKG:REGEX ...]
#
# BASE and NEW are commits (e.g. main~5 main). The default set is the one
# the house refactor of issue 23 was measured with: the Core's failover and
# earliest-window search, expression evaluation, the 1000-manager grid's
# query and admin, durable reservations and the simulator at rest.
set -eu
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
base=$1 new=$2 rounds=${3:-5}
shift 2; [ $# -gt 0 ] && shift
set -- "${@:-}"
if [ -z "${1:-}" ]; then
	set -- ./node/:'PatentKillReattach|EarliestSearch' ./query/:'Eval$|Compile$' \
		./daemon/:'GridQuery1000|AdminAll1000|DurableReserveRelease' ./sim/:'SimAtRest'
fi
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/gridmgr-compare.XXXXXX)
trap 'git -C "$top" worktree remove --force "$work/base" 2>/dev/null || true; git -C "$top" worktree remove --force "$work/new" 2>/dev/null || true; rm -rf "$work"' EXIT
git -C "$top" worktree add -q --detach "$work/base" "$base"
git -C "$top" worktree add -q --detach "$work/new" "$new"
for spec in "$@"; do
	pkg=${spec%%:*} re=${spec#*:}
	name=$(echo "$pkg" | tr -c 'a-zA-Z0-9\n' '_')
	for side in base new; do
		(cd "$work/$side" && go test -c -o "$work/$side.$name.test" "$pkg")
	done
	for i in $(seq "$rounds"); do
		for side in base new; do
			(cd "$work/$side/$pkg" && "$work/$side.$name.test" -test.run '^$' -test.bench "$re" -test.benchmem -test.count 1) |
				grep '^Benchmark' | sed "s/^/$side /" >>"$work/out"
		done
	done
done
python3 - "$work/out" "$rounds" <<'PY'
import sys, statistics, collections
vals = collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    f = line.split()
    side, name = f[0], f[1].rsplit('-', 1)[0]
    for i in range(3, len(f) - 1, 2):
        try:
            v = float(f[i])
        except ValueError:
            continue
        key = (name, f[i + 1])
        if key not in order:
            order.append(key)
        vals[(side,) + key].append(v)
print("%-48s %-14s %14s %14s %8s" % ("benchmark (%s rounds, medians)" % sys.argv[2], "metric", "base", "new", "new/base"))
for name, unit in order:
    b, n = vals.get(("base", name, unit)), vals.get(("new", name, unit))
    if not b or not n:
        continue
    mb, mn = statistics.median(b), statistics.median(n)
    r = "%.2f" % (mn / mb) if mb else "-"
    print("%-48s %-14s %14.4g %14.4g %8s" % (name, unit, mb, mn, r))
PY
