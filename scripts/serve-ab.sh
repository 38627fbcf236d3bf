#!/usr/bin/env bash
# Interleaved A/B of two `islands serve` binaries under pgbench, for noisy
# machines: runs A, B, A, B, ... each on a fresh data directory loaded with
# `--init tpcb --scale 4`, for two scripts: `CALL tpcb(...)` and
# `CALL tpcb_balance(...)` (select-only). Prints per script each run's figure,
# the B/A ratio of each pair and the median.
#
# usage: scripts/serve-ab.sh BIN_A BIN_B REPS CLIENTS DURABILITY MODE WHAT
#   MODE  pgbench's -M: simple, extended or prepared
#   WHAT  tps: throughput of a 10 s run (-T 10)
#         cpu: the server's user+system CPU time per transaction (µs) over a
#              fixed run of 5,000 transactions per client (-t 5000), read from
#              /proc/PID/stat; far less sensitive to other load than tps
# example: scripts/serve-ab.sh old/islands target/release/islands 4 16 sync prepared tps
set -euo pipefail
if [ $# -ne 7 ]; then sed -n '2,15p' "$0" >&2; exit 2; fi
A=$1 B=$2 reps=$3 clients=$4 dur=$5 mode=$6 what=$7
command -v pgbench >/dev/null || { echo "error: pgbench not on PATH (apt-get install postgresql-client)" >&2; exit 2; }
work=$(mktemp -d /tmp/serve-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
port=${ISLANDS_PORT_AB:-54391}
printf '\\set aid random(1, 100000 * 4)\n\\set bid random(1, 4)\n\\set tid random(1, 10 * 4)\n\\set delta random(-5000, 5000)\nCALL tpcb(:aid, :tid, :bid, :delta);\n' >"$work/call.sql"
printf '\\set aid random(1, 100000 * 4)\nCALL tpcb_balance(:aid);\n' >"$work/sel.sql"
tck=$(getconf CLK_TCK)
# run BIN SCRIPT: one server, one pgbench run, one figure.
run() {
  rm -rf "$work/d"
  "$1" serve --init tpcb --scale 4 --data-dir "$work/d" --listen "127.0.0.1:$port" \
    --durability "$dur" --max-connections 300 >"$work/out" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do grep -q "ready on" "$work/out" && break; sleep 0.1; done
  grep -q "ready on" "$work/out" || { cat "$work/out" >&2; exit 1; }
  local pg=(pgbench -n -M "$mode" -f "$2" -c "$clients" -j 2 -h 127.0.0.1 -p "$port" -U islands postgres)
  if [ "$what" = tps ]; then
    "${pg[@]}" -T 10 2>/dev/null | awk '/^tps/ {print $3}'
  else
    local c0 c1
    c0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    "${pg[@]}" -t 5000 >/dev/null 2>&1
    c1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    python3 -c "print(($c1 - $c0) / $tck * 1e6 / (5000 * $clients))"
  fi
  kill -TERM "$pid"; wait "$pid" || true
}
for s in call sel; do
  ra=() rb=()
  for _ in $(seq 1 "$reps"); do
    ra+=("$(run "$A" "$work/$s.sql")")
    rb+=("$(run "$B" "$work/$s.sql")")
  done
  python3 - "$s" "$what" "${ra[*]}" "${rb[*]}" <<'PY'
import statistics, sys
s, what = sys.argv[1], sys.argv[2]
a = [float(x) for x in sys.argv[3].split()]
b = [float(x) for x in sys.argv[4].split()]
r = [y / x for x, y in zip(a, b)]
unit = "tps" if what == "tps" else "server CPU us/txn"
print(f"{s}: {unit} A {[round(x, 1) for x in a]} B {[round(x, 1) for x in b]}")
print(f"{s}: B/A per pair {[round(x, 3) for x in r]} median {round(statistics.median(r), 3)}")
PY
done
