#!/usr/bin/env bash
# Figures for periodic checkpoints: TPC-C (full mix) with `--durability sync`
# on one island and on one island per core, with the default periodic
# checkpoints and without them.
#
# 1. Log size and recovery time: one run of each of the four, then
#    `islands tpcc check` on its log directory, which recovers every island
#    and prints how long each took ("recovered ... in X s"). Printed: the log
#    written, the checkpoints taken, the segments and checkpoint files left on
#    disk, and the recovery time (the sum over islands: tpcc check recovers
#    them one after the other).
# 2. The throughput cost of the checkpoints: PAIRS interleaved pairs per
#    deployment (fresh processes, checkpoints on then off, the order swapped
#    every other pair), and the on/off ratio of each pair and their median.
#
# usage: scripts/ckpt-figures.sh [DURATION_S] [PAIRS] [DIR]
#   DURATION_S  measured seconds of each run (default 60; no warm-up)
#   PAIRS       throughput pairs per deployment (default 3)
#   DIR         where the logs go, on the disk to measure (default: a fresh
#               directory under /var/tmp; removed at the end)
# env: ISLANDS_BIN (default target/release/islands), EXTRA (more bench options)
# example (a smoke test): scripts/ckpt-figures.sh 3 1
set -euo pipefail
duration=${1:-60}
pairs=${2:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${ISLANDS_BIN:-$here/target/release/islands}
[ -x "$bin" ] || { echo "error: $bin not built (cargo build --release)" >&2; exit 2; }
base=${3:-$(mktemp -d /var/tmp/islands-ckpt-figures.XXXXXX)}
mkdir -p "$base"
trap 'rm -rf "$base/log"' EXIT
off="--checkpoint-every-mb 0 --checkpoint-every-s 0"
extra=${EXTRA:-}

# run TAG DEPLOYMENT CKPT: one bench run; its JSON goes to $base/TAG.json.
run() {
  rm -rf "$base/log"
  # shellcheck disable=SC2086
  "$bin" bench $2 $3 $extra --durability sync --log-dir "$base/log" --warmup 0 \
    --duration "$duration" --progress quiet --json "$base/$1.json" tpcc >/dev/null
}

echo "# 1. log size and recovery time after ${duration} s of TPC-C sync"
for dep in "1" "per-core"; do
  for ck in on off; do
    tag="size-$dep-$ck"
    if [ $ck = on ]; then run "$tag" "--islands $dep" ""; else run "$tag" "--islands $dep" "$off"; fi
    wh=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["parameters"]["warehouses"])' "$base/$tag.json")
    "$bin" tpcc check --log-dir "$base/log" --warehouses "$wh" >"$base/$tag.check" 2>&1 ||
      { echo "error: tpcc check failed:" >&2; cat "$base/$tag.check" >&2; exit 1; }
  done
done
rm -rf "$base/log"
python3 - "$base" <<'PY'
import json, re, sys
d = sys.argv[1]
print(f"{'islands':<9} {'ckpt':<4} {'txn/s':>9} {'log MB':>8} {'ckpts':>5} {'left: log MB':>12} {'ckpt MB':>8} {'recovery s':>10}")
for dep in ["1", "per-core"]:
    for ck in ["on", "off"]:
        t = f"size-{dep}-{ck}"
        r = json.load(open(f"{d}/{t}.json"))
        log = r["log"]
        rec = [float(x) for x in re.findall(r"recovered .* in ([0-9.]+) s", open(f"{d}/{t}.check").read())]
        mb = lambda b: b / 2**20
        print(f"{dep:<9} {ck:<4} {r['throughput_tps']:>9.0f} {mb(log['bytes']):>8.0f} {log['checkpoints']:>5} "
              f"{mb(log['segment_bytes_end']):>12.0f} {mb(log['checkpoint_bytes_end']):>8.0f} {sum(rec):>10.2f}")
PY

echo
echo "# 2. throughput with checkpoints on / off, ${pairs} interleaved pairs of ${duration} s each"
for dep in "1" "per-core"; do
  for i in $(seq 1 "$pairs"); do
    if [ $((i % 2)) -eq 1 ]; then order="on off"; else order="off on"; fi
    for ck in $order; do
      if [ $ck = on ]; then run "ab-$dep-$ck-$i" "--islands $dep" ""; else run "ab-$dep-$ck-$i" "--islands $dep" "$off"; fi
    done
  done
done
python3 - "$base" "$pairs" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
for dep in ["1", "per-core"]:
    get = lambda ck, i: json.load(open(f"{d}/ab-{dep}-{ck}-{i}.json"))
    on = [get("on", i) for i in range(1, n + 1)]
    off = [get("off", i) for i in range(1, n + 1)]
    r = [a["throughput_tps"] / b["throughput_tps"] for a, b in zip(on, off)]
    print(f"islands {dep}: on  txn/s", [round(x["throughput_tps"]) for x in on],
          "checkpoints", [x["log"]["checkpoints"] for x in on])
    print(f"islands {dep}: off txn/s", [round(x["throughput_tps"]) for x in off])
    print(f"islands {dep}: on/off per pair", [round(x, 3) for x in r], "median", round(statistics.median(r), 3))
PY
echo
echo "JSON and tpcc check output in $base"
