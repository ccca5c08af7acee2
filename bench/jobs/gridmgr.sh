#!/usr/bin/env bash
# The gridmgr half of the job-layer benchmark (see README.md beside this
# file): a PLACEHOLDER until `gridmgr job submit/q/wait` exists.
#
#   bench/jobs/gridmgr.sh [--gridmgr BIN] [--jobs N] [--runs R]
#
# When the job layer lands, this script is to measure on a grid formed on
# this machine what slurm.sh measures on Slurm, and print one line per
# measurement in the same form, starting with "gridmgr " instead of
# "slurm ", for compare.sh to pair them:
#
#   gridmgr mode=NAME submit=loop jobs=N submit_per_s=X completed_per_s=X
#   gridmgr mode=NAME submit=array jobs=N submit_s=X completed_per_s=X   (if it has arrays)
#   gridmgr mode=NAME latency_runs=R start_latency_p50_s=X start_latency_p90_s=X ...
#
# (fields ending in _per_s: higher is better; other numeric ones ending in
# _s: lower is better; mode and load1 are labels; submit pairs the lines).
# The jobs: the same trivial `true`, one cpu and 50 MB each, N of them as
# fast as a loop of `gridmgr job submit` takes them, completion measured
# from the first submit to the last job done (`gridmgr job wait` or q
# empty); latency from before `job submit` to the job's own `date +%s.%N`.
set -euo pipefail

bin=""
while [ $# -gt 0 ]; do
	case $1 in
	--gridmgr) bin=$2; shift ;;
	--gridmgr=*) bin=${1#*=} ;;
	--jobs | --runs) shift ;;
	--jobs=* | --runs=*) ;;
	-h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "gridmgr.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
: "$bin"
echo "gridmgr half: not yet available" >&2
exit 0
