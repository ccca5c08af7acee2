#!/usr/bin/env bash
# The gridmgr half of the job-layer benchmark (see README.md beside this
# file): what slurm.sh measures on Slurm, measured on gridmgr's six-manager
# demo grid formed on this machine (`gridmgr demo`, run as root so that jobs
# run confined), jobs submitted at gm160 as a user would on their host.
#
#   bench/jobs/gridmgr.sh [--gridmgr BIN] [--jobs N] [--runs R]
#
# It prints one line per measurement, in slurm.sh's form with "gridmgr "
# first, for compare.sh to pair them:
#
#   gridmgr mode=demo6 submit=loop jobs=N submit_per_s=X completed_per_s=X load1=L
#   gridmgr mode=demo6 submit=array jobs=N submit_s=X completed_per_s=X load1=L
#   gridmgr mode=demo6 latency_runs=R start_latency_p50_s=X start_latency_p90_s=X load1=L
#
# The jobs: a trivial program (`exit 0`), one cpu and 50 MiB each. loop: N
# one-job submits from a shell loop of `gridmgr job submit`; array: one
# submit of count = N. Completion is timed from the first submit to the
# last job ended (`gridmgr job q --json`). Latency: from before
# `job submit` to the job's own `date +%s.%N`, one job at a time on the
# idle grid.
set -euo pipefail

bin=""
jobs=1000
runs=20
while [ $# -gt 0 ]; do
	case $1 in
	--gridmgr) bin=$2; shift ;;
	--gridmgr=*) bin=${1#*=} ;;
	--jobs) jobs=$2; shift ;;
	--jobs=*) jobs=${1#*=} ;;
	--runs) runs=$2; shift ;;
	--runs=*) runs=${1#*=} ;;
	-h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "gridmgr.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$(id -u)" != 0 ]; then
	echo "gridmgr.sh: jobs run confined, which needs root" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/gridmgr-bench-gm.XXXXXX)
demo_pid=""
cleanup() {
	if [ -n "$demo_pid" ]; then
		kill -INT "$demo_pid" 2>/dev/null || true
		wait "$demo_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT
if [ -z "$bin" ]; then
	echo "gridmgr.sh: building gridmgr (the first build takes minutes)" >&2
	(cd "$top" && go build -o "$work/gridmgr" ./cmd/gridmgr)
	bin=$work/gridmgr
fi
load1() { cut -d' ' -f1 /proc/loadavg; }
now() { date +%s.%N; }

# The grid: the demo, until its tour is over and it says how to reach it.
"$bin" demo >"$work/demo.log" 2>&1 &
demo_pid=$!
for _ in $(seq 1 600); do
	grep -q 'keeps running until Ctrl-C' "$work/demo.log" && break
	kill -0 "$demo_pid" 2>/dev/null || { cat "$work/demo.log" >&2; echo "gridmgr.sh: the demo stopped" >&2; exit 1; }
	sleep 0.2
done
dir=$(sed -n 's/.* job q  -d \([^ ]*\) .*/\1/p' "$work/demo.log" | head -1)
[ -n "$dir" ] || { cat "$work/demo.log" >&2; echo "gridmgr.sh: no data dir of gm160 in the demo's output" >&2; exit 1; }

mkdir -p "$work/job"
cat >"$work/job/true.sh" <<'EOF'
#!/bin/sh
exit 0
EOF
cat >"$work/job/stamp.sh" <<'EOF'
#!/bin/sh
mkdir -p out
date +%s.%N > out/started
EOF
chmod 755 "$work/job/true.sh" "$work/job/stamp.sh"
jobfile() { # NAME PROGRAM COUNT [OUTPUT]
	{
		echo "name = \"$1\""
		echo "program = \"$2\""
		echo "count = $3"
		echo 'cpus = 1'
		echo 'memory = "50MiB"'
		echo 'runtime = "1m"'
		[ -n "${4:-}" ] && echo "outputs = [\"$4\"]"
		true
	} >"$work/job/$1.toml"
}

# not_ended prints how many of the user's jobs at gm160 have not ended.
not_ended() {
	"$bin" job q -d "$dir" --json --limit 5000 |
		grep -o '"state": *"[a-z-]*"' | grep -cv '"\(completed\|failed\|removed\|held\)"' || true
}
wait_all() {
	while [ "$(not_ended)" != 0 ]; do sleep 0.2; done
}

# 1. loop: N one-job submits.
jobfile one true.sh 1
t0=$(now)
for _ in $(seq 1 "$jobs"); do
	"$bin" job submit -d "$dir" "$work/job/one.toml" >/dev/null
done
t1=$(now)
wait_all
t2=$(now)
echo "gridmgr mode=demo6 submit=loop jobs=$jobs submit_per_s=$(echo "$jobs / ($t1 - $t0)" | bc -l | xargs printf %.1f) completed_per_s=$(echo "$jobs / ($t2 - $t0)" | bc -l | xargs printf %.1f) load1=$(load1)"

# 2. array: one submit of count = N.
jobfile arr true.sh "$jobs"
t0=$(now)
"$bin" job submit -d "$dir" "$work/job/arr.toml" >/dev/null
t1=$(now)
wait_all
t2=$(now)
echo "gridmgr mode=demo6 submit=array jobs=$jobs submit_s=$(echo "$t1 - $t0" | bc -l | xargs printf %.3f) completed_per_s=$(echo "$jobs / ($t2 - $t0)" | bc -l | xargs printf %.1f) load1=$(load1)"

# 3. latency, one job at a time on the idle grid.
jobfile stamp stamp.sh 1 started
sleep 4 # the claims of the runs above are let go
lat=()
for _ in $(seq 1 "$runs"); do
	rm -rf "$work/job/results-stamp"
	t0=$(now)
	id=$("$bin" job submit -d "$dir" "$work/job/stamp.toml" | sed -n 's/.* as \([^ ]*\).*/\1/p')
	"$bin" job wait -d "$dir" "$id" >/dev/null
	started=$(cat "$work/job/results-stamp/out/started")
	lat+=("$(echo "$started - $t0" | bc -l)")
	sleep 4 # its claim is let go: each run reserves anew
done
sorted=$(printf '%s\n' "${lat[@]}" | sort -g)
p50=$(echo "$sorted" | sed -n "$(( (runs + 1) / 2 ))p")
p90=$(echo "$sorted" | sed -n "$(( (runs * 9 + 9) / 10 ))p")
echo "gridmgr mode=demo6 latency_runs=$runs start_latency_p50_s=$(printf %.3f "$p50") start_latency_p90_s=$(printf %.3f "$p90") load1=$(load1)"
