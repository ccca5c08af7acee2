#!/bin/sh
# ticker: a round of work a second; the round count goes to output/.
case "$1" in
--init) echo 0 > output/rounds.txt; echo "initialised in $PWD"; exit 0 ;;
--values) echo "rounds $(cat output/rounds.txt 2>/dev/null || echo 0)"; exit 0 ;;
esac
trap 'echo "stopping after $n rounds"; exit 0' TERM INT
echo "$TICKER_GREETING"
n=$(cat output/rounds.txt 2>/dev/null || echo 0)
while :; do
  i=0
  while [ $i -lt 20000 ]; do i=$((i+1)); done
  n=$((n+1))
  echo "$n" > output/rounds.txt
  echo "round $n"
  sleep 1
done
