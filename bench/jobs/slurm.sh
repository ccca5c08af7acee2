#!/usr/bin/env bash
# The Slurm half of the job-layer benchmark (see README.md beside this file):
# a private one-node Slurm (munged + slurmctld + slurmd, all on this machine,
# in their own directory and ports, never touching /etc/slurm or a running
# munge), tuned to Slurm's best, then
#   (a) N trivial jobs (sbatch --wrap=true -c 1 --mem=50M) submitted as fast
#       as possible, once as a loop of sbatch and once as one job array;
#       jobs completed per second from the first submit to the last
#       completion (the last job gone from squeue, polled every 0.1 s,
#       then the whole queue empty);
#   (b) submit-to-running latency of one job on an idle system, over R runs.
# One summary line per measurement on stdout, starting with "slurm ".
#
#   bench/jobs/slurm.sh [--jobs N] [--runs R] [--cgroup | --both]
#                       [--dir DIR] [--port P] [--no-install] [--keep-logs]
#
#   --jobs N      jobs per throughput measurement (default 1000)
#   --runs R      latency runs (default 20)
#   --cgroup      proctrack/cgroup + task/cgroup (cgroup.conf written too)
#   --both        the default mode (proctrack/linuxproc) and then --cgroup
#   --dir DIR     private directory (default /tmp/gridmgr-bench-slurm);
#                 wiped and rebuilt on every run
#   --port P      slurmctld port; slurmd gets P+1 (default 16817)
#   --no-install  fail instead of apt-get installing slurm-wlm and munge
#   --keep-logs   leave DIR (logs, config) behind after the run
#
# Needs root (slurmd runs the jobs as root). Every daemon it starts is
# stopped on exit, Ctrl-C included; a run left killed with -9 is cleaned up
# by the next run, which finds the old pids in DIR.
set -euo pipefail

jobs=1000
runs=20
modes=(linuxproc)
dir=/tmp/gridmgr-bench-slurm
port=16817
install=1
keep=0

usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
	case $1 in
	--jobs) jobs=$2; shift ;;
	--jobs=*) jobs=${1#*=} ;;
	--runs) runs=$2; shift ;;
	--runs=*) runs=${1#*=} ;;
	--cgroup) modes=(cgroup) ;;
	--both) modes=(linuxproc cgroup) ;;
	--dir) dir=$2; shift ;;
	--dir=*) dir=${1#*=} ;;
	--port) port=$2; shift ;;
	--port=*) port=${1#*=} ;;
	--no-install) install=0 ;;
	--keep-logs) keep=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "slurm.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
case $jobs$runs in *[!0-9]*) echo "slurm.sh: --jobs and --runs take a number" >&2; exit 2 ;; esac
{ [ "$jobs" -ge 1 ] && [ "$runs" -ge 1 ]; } || { echo "slurm.sh: --jobs and --runs must be at least 1" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "slurm.sh: run as root (slurmd runs the jobs as root)" >&2; exit 2; }
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
dir=${dir%/}
# One run per directory at a time: a second would take the first's daemons
# for leftovers.
exec 9>"$dir.lock"
flock -n 9 || { echo "slurm.sh: another slurm.sh is running with $dir" >&2; exit 2; }
# $dir is wiped on every run: refuse one this script did not make.
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -e "$dir/.gridmgr-bench-slurm" ]; then
	echo "slurm.sh: $dir exists and was not made by this script; give another --dir" >&2
	exit 2
fi

log() { printf 'slurm.sh: %s\n' "$*" >&2; }
now() { printf '%s\n' "$EPOCHREALTIME"; }

# ---- install ---------------------------------------------------------------

need=()
for cmd in munged sbatch squeue sinfo scancel slurmctld slurmd; do
	command -v "$cmd" >/dev/null 2>&1 || need+=("$cmd")
done
if [ ${#need[@]} -gt 0 ]; then
	[ "$install" = 1 ] || { log "missing ${need[*]} (and --no-install given)"; exit 1; }
	log "installing slurm-wlm and munge (missing: ${need[*]})"
	# Keep the packages' init scripts from starting a system-wide munge,
	# slurmctld and slurmd: this benchmark runs its own, and only its own.
	policy=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		policy=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod 755 "$policy"
	fi
	rc=0
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge; } >&2 || rc=$?
	[ -z "$policy" ] || rm -f "$policy"
	[ "$rc" = 0 ] || { log "apt-get failed ($rc)"; exit 1; }
fi

# ---- the daemons -----------------------------------------------------------

export SLURM_CONF=$dir/etc/slurm.conf
pids=()        # daemons this run started, newest last
cleanup_done=0

# alive PID: running, not a zombie (a detached slurmstepd that exited waits
# for init to reap it, which can take a while in a container).
alive() {
	[ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
	local st
	st=$({ sed 's/^.*) //' "/proc/$1/stat"; } 2>/dev/null | cut -c1)
	[ "$st" != Z ]
}

# ours PID: is PID a process whose command line or environment names $dir
# (i.e. one of the daemons, or a slurmstepd, started for this directory)?
ours() {
	local p=$1
	[ -r "/proc/$p/cmdline" ] || return 1
	{ tr '\0' '\n' <"/proc/$p/cmdline"; } 2>/dev/null | grep -qF "$dir/" && return 0
	{ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" && return 0
	return 1
}

# stop PID...: TERM, up to 10 s, then KILL.
stop() {
	local p i
	for p in "$@"; do
		if alive "$p"; then kill -TERM "$p" 2>/dev/null || true; fi
	done
	for i in $(seq 100); do
		local left=0
		for p in "$@"; do alive "$p" && left=1; done
		[ "$left" = 0 ] && return 0
		sleep 0.1
	done
	for p in "$@"; do alive "$p" && { log "pid $p did not stop on TERM: KILL"; kill -KILL "$p" 2>/dev/null || true; }; done
	return 0
}

# stepds: the slurmstepd processes serving this directory's slurmd (they
# detach from slurmd, so killing slurmd does not end them).
stepds() {
	local p
	for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
		ours "$p" && echo "$p"
	done
	return 0
}

shutdown() {
	[ "$cleanup_done" = 1 ] && return 0
	cleanup_done=1
	if [ ${#pids[@]} -ge 3 ] && alive "${pids[1]}" && alive "${pids[2]}"; then
		# Jobs still queued (Ctrl-C in a measurement): cancel them first, so
		# that no slurmstepd outlives its slurmd.
		timeout 10 scancel --quiet --user=root 2>/dev/null || true
		local i
		for i in $(seq 100); do
			[ -z "$(timeout 5 squeue -h -o %i 2>/dev/null || echo timeout)" ] && [ -z "$(stepds)" ] && break
			sleep 0.1
		done
	fi
	local r=()
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do r+=("${pids[i]}"); done
	[ ${#r[@]} -eq 0 ] || stop "${r[@]}"
	pids=()
	local s
	s=$(stepds)
	# shellcheck disable=SC2086 # one pid per word
	[ -z "$s" ] || stop $s
	rm -f "$dir"/run/*.pid
	return 0
}

on_exit() {
	local rc=$?
	trap - EXIT INT TERM
	shutdown
	if [ "$keep" = 1 ] || [ "$rc" != 0 ]; then
		log "logs and config kept in $dir"
	else
		wipe all
	fi
	exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Leftovers of an earlier run killed hard: its daemons' pid files in $dir.
if [ -d "$dir/run" ]; then
	old=()
	for f in "$dir"/run/*.pid; do
		[ -e "$f" ] || continue
		p=$(cat "$f" 2>/dev/null || true)
		case $p in '' | *[!0-9]*) continue ;; esac
		alive "$p" && ours "$p" && old+=("$p")
	done
	if [ ${#old[@]} -gt 0 ]; then
		log "stopping leftovers of an earlier run: ${old[*]}"
		stop "${old[@]}"
	fi
fi
s=$(stepds)
if [ -n "$s" ]; then
	log "stopping slurmstepds left by an earlier run: $s"
	# shellcheck disable=SC2086 # one pid per word
	stop $s
fi

node=$(hostname -s)
host_line() {
	# "NodeName=vm CPUs=2 Boards=1 ... RealMemory=24000" from the hardware,
	# with RealMemory lowered by a tenth so that slurmd never finds less.
	local l mem
	l=$(slurmd -C 2>/dev/null | grep '^NodeName=' | head -1)
	[ -n "$l" ] || l="NodeName=$node CPUs=$(nproc) RealMemory=$(awk '/^MemTotal/ {print int($2/1024)}' /proc/meminfo)"
	mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$l")
	sed "s/RealMemory=[0-9]*/RealMemory=$((mem * 9 / 10))/; s/^NodeName=[^ ]*/NodeName=$node/" <<<"$l"
}

# wipe: empty $dir but for its marker, which goes last, so that a wipe cut
# short (Ctrl-C) still leaves a directory the next run will wipe.
wipe() {
	[ -d "$dir" ] || return 0
	find "$dir" -mindepth 1 -maxdepth 1 ! -name .gridmgr-bench-slurm -exec rm -rf {} +
	[ "${1:-}" != all ] || { rm -f "$dir/.gridmgr-bench-slurm"; rmdir "$dir"; }
}

setup() { # MODE
	local mode=$1
	mkdir -p "$dir"
	touch "$dir/.gridmgr-bench-slurm"
	wipe
	mkdir -p "$dir"/{etc,run,log,state,spool,munge,work,lat}
	chmod 755 "$dir" "$dir/munge"
	head -c 1024 /dev/urandom >"$dir/etc/munge.key"
	chmod 400 "$dir/etc/munge.key"

	local proctrack=proctrack/linuxproc task=task/none
	if [ "$mode" = cgroup ]; then
		proctrack=proctrack/cgroup task=task/cgroup
		cat >"$dir/etc/cgroup.conf" <<-EOF
			CgroupPlugin=autodetect
			CgroupMountpoint=/sys/fs/cgroup
			ConstrainCores=yes
			ConstrainRAMSpace=yes
			ConstrainDevices=no
		EOF
	fi
	local maxjobs=$((jobs * 3 + runs + 1000))
	[ "$maxjobs" -ge 10000 ] || maxjobs=10000
	local maxarray=$((jobs + 1))
	[ "$maxarray" -ge 1001 ] || maxarray=1001
	cat >"$SLURM_CONF" <<-EOF
		# Written by bench/jobs/slurm.sh: a private one-node Slurm, mode $mode.
		ClusterName=gmbench
		SlurmctldHost=$node(127.0.0.1)
		SlurmctldPort=$port
		SlurmdPort=$((port + 1))
		SlurmUser=root
		SlurmdUser=root
		AuthType=auth/munge
		CredType=cred/munge
		AuthInfo=socket=$dir/munge/munge.socket
		StateSaveLocation=$dir/state
		SlurmdSpoolDir=$dir/spool
		SlurmctldPidFile=$dir/run/slurmctld.pid
		SlurmdPidFile=$dir/run/slurmd.pid
		SlurmctldLogFile=$dir/log/slurmctld.log
		SlurmdLogFile=$dir/log/slurmd.log
		SlurmctldDebug=error
		SlurmdDebug=error
		MailProg=/bin/true
		MpiDefault=none
		SwitchType=switch/none
		ProctrackType=$proctrack
		TaskPlugin=$task
		JobAcctGatherType=jobacct_gather/none
		AccountingStorageType=accounting_storage/none
		JobCompType=jobcomp/none
		SchedulerType=sched/backfill
		SelectType=select/cons_tres
		SelectTypeParameters=CR_Core_Memory
		# Slurm at its best: schedule on every submit and every completion.
		# The epilog's completion message makes slurmctld schedule at once;
		# without one, freed cpus wait for the 1-second background pass.
		SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=$((jobs > 1000 ? jobs : 1000))
		Epilog=/bin/true
		MaxJobCount=$maxjobs
		MaxArraySize=$maxarray
		ReturnToService=2
		$(host_line) NodeAddr=127.0.0.1 State=UNKNOWN
		PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
	EOF
}

start() { # MODE
	local mode=$1 i
	setup "$mode"
	# setsid: a Ctrl-C in the terminal goes to this script only, which then
	# cancels the jobs and stops the daemons in order; sent to the daemons
	# too, it would leave detached slurmstepds waiting for a dead slurmd.
	setsid munged -F --force --key-file="$dir/etc/munge.key" --socket="$dir/munge/munge.socket" \
		--pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
		--seed-file="$dir/munge/seed" >>"$dir/log/munged.out" 2>&1 &
	pids+=($!)
	for i in $(seq 100); do
		[ -S "$dir/munge/munge.socket" ] && break
		alive "${pids[-1]}" || { log "munged exited:"; tail -5 "$dir/log/munged.out" "$dir/log/munged.log" >&2 2>/dev/null; return 1; }
		sleep 0.1
	done
	munge -n --socket="$dir/munge/munge.socket" | unmunge --socket="$dir/munge/munge.socket" >/dev/null ||
		{ log "munge does not answer on $dir/munge/munge.socket"; return 1; }

	setsid slurmctld -D -c >>"$dir/log/slurmctld.out" 2>&1 &
	pids+=($!)
	setsid slurmd -D -N "$node" >>"$dir/log/slurmd.out" 2>&1 &
	pids+=($!)
	local state=""
	for i in $(seq 300); do
		state=$(sinfo -h -n "$node" -o %t 2>/dev/null || true)
		[ "$state" = idle ] && return 0
		local p
		for p in "${pids[@]}"; do
			alive "$p" || { log "a daemon exited at start ($mode):"; tail -n 20 "$dir"/log/*.out "$dir"/log/*.log >&2 2>/dev/null; return 1; }
		done
		sleep 0.2
	done
	log "node $node not idle after 60 s (sinfo says '${state}'):"
	tail -n 20 "$dir"/log/*.log >&2 2>/dev/null
	return 1
}

# ---- the measurements -----------------------------------------------------

queue_empty() { [ -z "$(timeout 30 squeue -h -o %i 2>/dev/null || echo failed)" ]; }

# wait_empty TIMEOUT_S [JOBID]: poll until the queue is empty and print
# when it was seen so. With JOBID (the last submitted; Slurm runs them in
# order), poll that one job every 0.1 s first: a one-job squeue costs
# slurmctld little, a whole-queue one packs every pending job each time.
wait_empty() {
	local deadline=$((EPOCHSECONDS + $1))
	if [ -n "${2:-}" ]; then
		until [ -z "$(timeout 30 squeue -h -o %i -j "$2" 2>/dev/null || echo failed)" ]; do
			[ "$EPOCHSECONDS" -le "$deadline" ] || { log "job $2 not done after $1 s"; return 1; }
			sleep 0.1
		done
	fi
	until queue_empty; do
		[ "$EPOCHSECONDS" -le "$deadline" ] || { log "queue not empty after $1 s"; squeue >&2 || true; return 1; }
		sleep 0.1
	done
	now
}

jobargs=(-c 1 --mem=50M --output=/dev/null --error=/dev/null --chdir="$dir/work")

# Generous: 1 job/s would be twenty times below Slurm's worst tuned figure.
drain_timeout=$((jobs + 120))

# load1: the 1-minute load average, printed with every figure (a busy
# machine halves Slurm's rates; see README.md).
load1() { cut -d' ' -f1 /proc/loadavg; }

fmt() { awk -v n="$1" -v d="$2" 'BEGIN { printf "%.1f", n / d }'; }

measure_loop() { # MODE
	local mode=$1 t0 t1 t2 i load
	load=$(load1)
	t0=$(now)
	local id
	for ((i = 0; i < jobs; i++)); do
		id=$(sbatch --parsable "${jobargs[@]}" --wrap=true)
	done
	t1=$(now)
	t2=$(wait_empty "$drain_timeout" "$id")
	echo "slurm mode=$mode submit=loop jobs=$jobs submit_per_s=$(fmt "$jobs" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')") completed_per_s=$(fmt "$jobs" "$(awk -v a="$t0" -v b="$t2" 'BEGIN{print b-a}')") load1=$load"
}

measure_array() { # MODE
	local mode=$1 t0 t1 t2 load id
	load=$(load1)
	t0=$(now)
	id=$(sbatch --parsable "${jobargs[@]}" --array=0-$((jobs - 1)) --wrap=true)
	t1=$(now)
	t2=$(wait_empty "$drain_timeout" "${id}_$((jobs - 1))")
	echo "slurm mode=$mode submit=array jobs=$jobs submit_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}') completed_per_s=$(fmt "$jobs" "$(awk -v a="$t0" -v b="$t2" 'BEGIN{print b-a}')") load1=$load"
}

measure_latency() { # MODE
	local mode=$1 i t0 f lat=() deadline load
	load=$(load1)
	for ((i = 0; i < runs; i++)); do
		wait_empty 60 >/dev/null
		f=$dir/lat/$i
		rm -f "$f" "$f.tmp"
		t0=$(now)
		sbatch --parsable "${jobargs[@]}" --wrap="date +%s.%N >$f.tmp && mv $f.tmp $f" >/dev/null
		deadline=$((EPOCHSECONDS + 60))
		until [ -s "$f" ]; do
			[ "$EPOCHSECONDS" -le "$deadline" ] || { log "latency job $i did not start within 60 s"; return 1; }
			sleep 0.01
		done
		lat+=("$(awk -v a="$t0" -v b="$(cat "$f")" 'BEGIN{printf "%.4f", b-a}')")
	done
	wait_empty 60 >/dev/null
	printf '%s\n' "${lat[@]}" | sort -g | awk -v mode="$mode" -v n="$runs" -v load="$load" '
		{ v[NR] = $1 }
		END {
			p50 = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
			i90 = int(0.9 * n + 0.999999); if (i90 < 1) i90 = 1
			printf "slurm mode=%s latency_runs=%d start_latency_p50_s=%.3f start_latency_p90_s=%.3f start_latency_min_s=%.3f start_latency_max_s=%.3f load1=%s\n", mode, n, p50, v[i90], v[1], v[n], load
		}'
}

for mode in "${modes[@]}"; do
	log "mode $mode: starting munged, slurmctld, slurmd in $dir (ports $port, $((port + 1)))"
	start "$mode"
	log "mode $mode: node idle; $jobs jobs from a loop of sbatch"
	measure_loop "$mode"
	log "mode $mode: $jobs jobs as one array"
	measure_array "$mode"
	log "mode $mode: start latency, $runs runs on an idle node"
	measure_latency "$mode"
	shutdown
	cleanup_done=0
done
