#!/usr/bin/env bash
# Glide-ins measured against the same work without them (README.md beside
# this file). On this machine, as root (glide-ins and jobs run confined):
# a launcher "bl" and three executing managers b1, b2, b3 under it (2 cpus,
# 2 GiB each, loopback), then
#
#   1. launch-to-ready: `gridmgr glidein --count 3` until all three have
#      joined, ÷ install-to-running of a plain application of the same size
#      — a 3-job spread-free cluster whose program is a directory holding
#      the same gridmgr binary and a run.sh that sleeps — from submit until
#      the three are running;
#   2. throughput: a 60-job trivial array (exit 0, 1 cpu, 50 MiB) through the
#      3 glide-ins (requirement attrs.glidein == NAME) ÷ the same array
#      placed directly on b1, b2, b3 (!has(attrs.glidein)), jobs per second
#      from submit to the last job ended.
#
#   bench/glidein/run.sh [--gridmgr BIN] [--jobs N] [--runs R]
#
# It prints one line per run and the ratios:
#   glidein launch_ready_s=X plain_running_s=Y ratio=X/Y (goal <= 1.5)
#   glidein jobs=N direct_per_s=A glidein_per_s=B ratio=B/A (goal >= 1.0)
set -euo pipefail

bin=""
jobs=60
runs=1
while [ $# -gt 0 ]; do
	case $1 in
	--gridmgr) bin=$2; shift ;;
	--jobs) jobs=$2; shift ;;
	--runs) runs=$2; shift ;;
	-h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$(id -u)" != 0 ]; then
	echo "run.sh: glide-ins and jobs run confined, which needs root" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=$(mktemp -d /tmp/gridmgr-bench-glidein.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
if [ -z "$bin" ]; then
	echo "run.sh: building gridmgr" >&2
	(cd "$top" && go build -o "$work/gridmgr" ./cmd/gridmgr)
	bin=$work/gridmgr
fi
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
export GRIDMGR_CLIENT_KEY=$work/client.key
now() { date +%s.%N; }
calc() { echo "$1" | bc -l | xargs printf %.${2:-2}f; }

start() { # NAME [SUPERIOR]
	mkdir -p "$work/$1"
	{
		echo "name = \"$1\""
		echo 'data_dir = "data"'
		echo 'listen = ["/ip4/127.0.0.1/tcp/0"]'
		[ -n "${2:-}" ] && echo "superiors = [\"$(head -1 "$work/$2/data/addr")\"]"
		printf '[heartbeat]\ninterval = "500ms"\n[resources]\ncpus = 2\nmemory = "2GiB"\n'
	} >"$work/$1/m.toml"
	"$bin" run -c "$work/$1/m.toml" --log-level warn >"$work/$1/log" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 200); do [ -f "$work/$1/data/addr" ] && return; sleep 0.05; done
	cat "$work/$1/log" >&2; echo "run.sh: $1 did not start" >&2; exit 1
}
start bl
for h in b1 b2 b3; do start $h bl; done
dir=$work/bl/data
for _ in $(seq 1 200); do
	[ "$("$bin" tree -d "$dir" | grep -c '  up')" = 3 ] && break
	sleep 0.1
done

# not_ended CLUSTER: how many of its jobs have not ended; running CLUSTER:
# how many run.
states() { "$bin" job q -d "$dir" --json --ended --limit 5000 "$1" | grep -o '"state": *"[a-z_-]*"'; }
not_ended() { states "$1" | grep -cv '"\(completed\|failed\|removed\|held\)"' || true; }
running() { states "$1" | grep -c '"running"' || true; }
cluster_of() { sed -n 's/^submitted .* as \([^ ]*\).*/\1/p'; }

mkdir -p "$work/plain/app" "$work/job"
cp "$bin" "$work/plain/app/gridmgr"
printf '#!/bin/sh\nexec sleep 600\n' >"$work/plain/app/run.sh"
chmod 755 "$work/plain/app/run.sh"
cat >"$work/plain/plain.toml" <<EOF
program = "app"
executable = "run.sh"
count = 3
cpus = 1
memory = "512MiB"
runtime = "10m"
requirement = 'name != "bl"'
EOF
printf '#!/bin/sh\nexit 0\n' >"$work/job/true.sh"
chmod 755 "$work/job/true.sh"
jobfile() { # NAME REQUIREMENT
	printf 'name = "%s"\nprogram = "true.sh"\ncount = %d\ncpus = 1\nmemory = "50MiB"\nruntime = "1m"\nrequirement = '"'"'%s'"'"'\n' \
		"$1" "$jobs" "$2" >"$work/job/$1.toml"
}

for r in $(seq 1 "$runs"); do
	# 1. a plain application of the same size, on the three hosts.
	t0=$(now)
	cl=$("$bin" job submit -d "$dir" "$work/plain/plain.toml" 2>/dev/null | cluster_of)
	while [ "$(running "$cl")" != 3 ]; do sleep 0.05; done
	t1=$(now)
	"$bin" job rm -d "$dir" "$cl" >/dev/null
	while [ "$(not_ended "$cl")" != 0 ]; do sleep 0.1; done
	plain=$(calc "$t1 - $t0" 3)

	# 2. the array directly on the hosts.
	jobfile direct '!has(attrs.glidein) && name != "bl"'
	t0=$(now)
	cl=$("$bin" job submit -d "$dir" "$work/job/direct.toml" 2>/dev/null | cluster_of)
	while [ "$(not_ended "$cl")" != 0 ]; do sleep 0.1; done
	t1=$(now)
	direct=$(calc "$jobs / ($t1 - $t0)" 2)
	[ -n "${KEEP:-}" ] && "$bin" job log -d "$dir" --json "$cl" >"$KEEP/direct-$r.json"

	# 3. three glide-ins of 2 cpus each: launch to ready.
	name=bench$r
	t0=$(now)
	"$bin" glidein -d "$dir" --name "$name" --count 3 --cpus 2 --mem 1GiB --duration 20m --idle 10m \
		--requirement 'name != "bl"' --heartbeat 500ms --program "$bin" --timeout 5m >/dev/null 2>"$work/glidein.log" ||
		{ cat "$work/glidein.log" >&2; exit 1; }
	t1=$(now)
	ready=$(calc "$t1 - $t0" 3)

	# 4. the array through the glide-ins.
	jobfile onglide "attrs.glidein == \"$name\""
	t0=$(now)
	cl=$("$bin" job submit -d "$dir" "$work/job/onglide.toml" 2>/dev/null | cluster_of)
	while [ "$(not_ended "$cl")" != 0 ]; do sleep 0.1; done
	t1=$(now)
	glide=$(calc "$jobs / ($t1 - $t0)" 2)
	[ -n "${KEEP:-}" ] && "$bin" job log -d "$dir" --json "$cl" >"$KEEP/glidein-$r.json"
	"$bin" job q -d "$dir" --json --ended "$cl" | grep -o '"state": *"[a-z_-]*"' | sort | uniq -c >&2
	"$bin" glidein rm -d "$dir" "$name" >/dev/null
	while [ -n "$("$bin" glidein list -d "$dir" "$name" | grep -v '^no glide-ins' || true)" ]; do sleep 0.2; done

	echo "glidein run=$r launch_ready_s=$ready plain_running_s=$plain ratio=$(calc "$ready / $plain") (goal <= 1.5)"
	echo "glidein run=$r jobs=$jobs direct_per_s=$direct glidein_per_s=$glide ratio=$(calc "$glide / $direct") (goal >= 1.0)"
done
