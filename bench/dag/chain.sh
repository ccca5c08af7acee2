#!/usr/bin/env bash
# Workflow overhead: a chain of N trivial jobs run as one workflow
# (`gridmgr dag submit`, each node after the one before) against the same
# N jobs run by a script that submits one and waits for it before the
# next (`gridmgr job submit` then `gridmgr job wait`), on the six-manager
# demo grid formed on this machine, jobs submitted at gm160. Run as root
# (jobs run confined).
#
#   bench/dag/chain.sh [--gridmgr BIN] [--nodes N] [--every D] [--dag-every D]
#
# It prints:
#
#   dag-chain nodes=N dag_s=X script_s=Y ratio=X/Y dag_per_node_ms=A script_per_node_ms=B load1=L
#
# ratio ≤ 1.1 is the goal: a workflow may not cost more than a script that
# drives the same jobs. --every is how often the script's `job wait` asks
# (default 50ms; its default, 1s, would make the script far slower);
# --dag-every how often `dag wait` asks (default 1s, its own: the
# workflow does not wait for it, and each answer describes every node).
set -euo pipefail

bin=""
nodes=1000
every=50ms
dag_every=1s
while [ $# -gt 0 ]; do
	case $1 in
	--gridmgr) bin=$2; shift ;;
	--gridmgr=*) bin=${1#*=} ;;
	--nodes) nodes=$2; shift ;;
	--nodes=*) nodes=${1#*=} ;;
	--every) every=$2; shift ;;
	--every=*) every=${1#*=} ;;
	--dag-every) dag_every=$2; shift ;;
	--dag-every=*) dag_every=${1#*=} ;;
	-h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "chain.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$(id -u)" != 0 ]; then
	echo "chain.sh: jobs run confined, which needs root" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/gridmgr-bench-dag.XXXXXX)
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
	echo "chain.sh: building gridmgr" >&2
	(cd "$top" && go build -o "$work/gridmgr" ./cmd/gridmgr)
	bin=$work/gridmgr
fi
now() { date +%s.%N; }

"$bin" demo >"$work/demo.log" 2>&1 &
demo_pid=$!
for _ in $(seq 1 600); do
	grep -q 'keeps running until Ctrl-C' "$work/demo.log" && break
	kill -0 "$demo_pid" 2>/dev/null || { cat "$work/demo.log" >&2; echo "chain.sh: the demo stopped" >&2; exit 1; }
	sleep 0.2
done
dir=$(sed -n 's/.* job q  -d \([^ ]*\) .*/\1/p' "$work/demo.log" | head -1)
[ -n "$dir" ] || { cat "$work/demo.log" >&2; echo "chain.sh: no data dir of gm160 in the demo's output" >&2; exit 1; }

mkdir -p "$work/flow"
printf '#!/bin/sh\nexit 0\n' >"$work/flow/true.sh"
chmod +x "$work/flow/true.sh"
cat >"$work/flow/job.toml" <<'EOF'
name = "step"
program = "true.sh"
memory = "32MiB"
runtime = "1m"
EOF
{
	echo 'name = "chain"'
	for i in $(seq 0 $((nodes - 1))); do
		echo "[nodes.n$i]"
		echo 'program = "true.sh"'
		echo 'memory = "32MiB"'
		echo 'runtime = "1m"'
		[ "$i" -gt 0 ] && echo "after = [\"n$((i - 1))\"]"
	done
} >"$work/flow/flow.toml"

# The workflow.
t0=$(now)
id=$("$bin" dag submit -d "$dir" "$work/flow/flow.toml" 2>"$work/submit.err" | awk '{print $5}') ||
	{ cat "$work/submit.err" >&2; echo "chain.sh: dag submit failed" >&2; exit 1; }
"$bin" dag wait -d "$dir" --no-fetch --every "$dag_every" "$id" >"$work/wait.out" 2>&1 ||
	{ tail -5 "$work/wait.out" >&2; "$bin" dag status -d "$dir" "$id" >&2; echo "chain.sh: the workflow did not complete" >&2; exit 1; }
t1=$(now)

# The script.
t2=$(now)
for _ in $(seq 1 "$nodes"); do
	c=$("$bin" job submit -d "$dir" "$work/flow/job.toml" 2>/dev/null | awk '{print $4}')
	"$bin" job wait -d "$dir" --no-fetch --every "$every" "$c" >"$work/wait.out" 2>&1 ||
		{ cat "$work/wait.out" >&2; echo "chain.sh: job $c did not complete" >&2; exit 1; }
done
t3=$(now)

awk -v n="$nodes" -v d="$(echo "$t1 - $t0" | bc)" -v s="$(echo "$t3 - $t2" | bc)" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
	'BEGIN { printf "dag-chain nodes=%d dag_s=%.1f script_s=%.1f ratio=%.2f dag_per_node_ms=%.0f script_per_node_ms=%.0f load1=%s\n", n, d, s, d/s, 1000*d/n, 1000*s/n, l }'
