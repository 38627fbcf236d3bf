#!/usr/bin/env bash
# Interleaved A/B comparison of two `islands bench` configurations, for noisy
# machines: runs A, B, A, B, ... (each a fresh process with its own load) and
# prints every throughput, the B/A ratio of each pair and the median ratio.
#
# usage: scripts/ab.sh "<common args>" "<A args>" "<B args>" "<workload args>" REPS
# example: scripts/ab.sh "--workers 2 --duration 5" "--durability off" "--durability sync" "ycsb --preset silo" 3
set -euo pipefail
if [ $# -ne 5 ]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${ISLANDS_BIN:-$here/target/release/islands}
[ -x "$bin" ] || { echo "error: $bin not built (cargo build --release)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq 1 "$5"); do
  for v in A B; do
    if [ $v = A ]; then x=$2; else x=$3; fi
    # shellcheck disable=SC2086
    "$bin" bench $1 $x --progress quiet --log-dir "$out/log" --json "$out/$v-$i.json" $4 >/dev/null
    rm -rf "$out/log"
  done
done
python3 - "$out" "$5" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
a = [json.load(open(f"{d}/A-{i}.json"))["throughput_tps"] for i in range(1, n + 1)]
b = [json.load(open(f"{d}/B-{i}.json"))["throughput_tps"] for i in range(1, n + 1)]
print("A txn/s", [round(x) for x in a])
print("B txn/s", [round(x) for x in b])
r = [y / x for x, y in zip(a, b)]
print("B/A per pair", [round(x, 3) for x in r], "median", round(statistics.median(r), 3))
# The host probe's cross-core round trip (ns) before each run, when the
# workers were pinned to two CPUs: pairs whose readings differ ran in
# different host states (see docs/measuring.md).
def host(v, i):
    h = json.load(open(f"{d}/{v}-{i}.json")).get("host")
    return h["round_trip_ns_before"] if h else None
if any(host("A", i) is not None for i in range(1, n + 1)):
    print("host ns A", [host("A", i) for i in range(1, n + 1)])
    print("host ns B", [host("B", i) for i in range(1, n + 1)])
PY
