#!/bin/sh
# Confined start, side by side: the time from launching an installed
# application to its program's first instruction, for plain fork/exec, a
# shell script that makes a cgroup, gridmgr's runner (warm and cold),
# runc, crun and bubblewrap, all in one run, alternating, with the same
# program and limits (BenchmarkSideBySide in deploy/runner). It prints a
# table of medians, p90s and ratios; only ratios from one run mean much.
#
# Run it by hand, as root, never in CI:
#   sudo bench/confined-start.sh [rounds]      (default 30)
# It INSTALLS Debian packages when they are missing (apt-get install -y
# runc crun bubblewrap, and gcc libc6-dev), compiles
# deploy/runner/testdata/ready.c statically into a temporary directory,
# and runs go test -run '^$' -bench SideBySide -benchtime 1x.
set -eu

cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "confined-start.sh: run it as root (sudo $0): it installs packages and makes cgroups" >&2
	exit 1
fi

rounds=${1:-${GRIDMGR_BENCH_ROUNDS:-30}}

# What the candidates need, from Debian.
pkgs=
command -v runc >/dev/null 2>&1 || pkgs="$pkgs runc"
command -v crun >/dev/null 2>&1 || pkgs="$pkgs crun"
command -v bwrap >/dev/null 2>&1 || pkgs="$pkgs bubblewrap"
command -v gcc >/dev/null 2>&1 || pkgs="$pkgs gcc"
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(find /usr/lib -name libc.a 2>/dev/null | head -n 1)" ] || pkgs="$pkgs libc6-dev"
if [ -n "$pkgs" ]; then
	echo "installing:$pkgs"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086 # one word per package
	apt-get install -y -qq --no-install-recommends $pkgs
fi

# runc lives in /usr/sbin; sudo's secure_path may not have Go's.
PATH="$PATH:/usr/sbin:/sbin"
if ! command -v go >/dev/null 2>&1; then
	for d in /usr/local/go/bin /usr/lib/go/bin; do
		[ -x "$d/go" ] && PATH="$PATH:$d" && break
	done
fi
command -v go >/dev/null 2>&1 || { echo "confined-start.sh: no go on PATH" >&2; exit 1; }

tmp=$(mktemp -d /tmp/confined-start.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
gcc -O2 -static -o "$tmp/ready" deploy/runner/testdata/ready.c

echo "$(uname -sr), $(nproc) CPUs, $(go version | cut -d' ' -f3), $rounds rounds"
GRIDMGR_BENCH_READY="$tmp/ready" GRIDMGR_BENCH_ROUNDS="$rounds" \
	go test -run '^$' -bench '^BenchmarkSideBySide$' -benchtime 1x -timeout 30m ./deploy/runner/
