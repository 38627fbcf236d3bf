#!/usr/bin/env bash
# The multisite sweep of the transports (issue 31, "Performance"): the 10-row
# micro benchmark at 0/20/50/100% multisite, read-only and update, durability
# off and sync, on every transport, each as a ratio to inproc at the same point.
#
# usage: scripts/sweep-transports.sh [--help]
#
# Each run is a fresh `islands bench` (its own processes, its own load). At
# each point the transports run interleaved, inproc first, ROUNDS times:
#   inproc       islands as thread groups of one process, in-process queues
#   shm, uds     islands as thread groups of one process, each with the
#                transport a process of its own would have
#   procs-shm,   one process per island (--processes), joined by shared
#   procs-uds    memory or Unix sockets
# Every run passes --transport, so even 0% multisite runs the distributed
# executor and measures what a transport costs when nothing crosses.
#
# The table gives, per point and transport, the median throughput of the
# rounds, the median of each round's ratio to that round's inproc run, and
# per distributed commit the frames, batches and send + receive system calls
# (medians; `traffic` in the run's JSON). The runs' JSON, a summary.csv and
# each failed run's stderr stay in OUT.
#
# Settings (environment):
#   ROUNDS=3          rounds at each point
#   DURATION=5        measured seconds per run
#   WARMUP=1          warm-up seconds per run
#   ISLANDS_BIN       the islands binary (default: target/release/islands)
#   ISLANDS=per-core  --islands of every run
#   TRANSPORTS="inproc shm uds procs-shm procs-uds"
#   MULTISITE="0 20 50 100"   MODES="read update"   DURABILITY="off sync"
#   EXTRA=""          more bench options for every run (e.g. "--workers-per-island 1")
#   OUT               where the results go (default: a new temporary directory)
# example: ROUNDS=1 DURATION=1 WARMUP=0.2 scripts/sweep-transports.sh
set -euo pipefail
if [ $# -gt 0 ]; then
  case $1 in
    -h|--help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: no arguments ($1): settings come from the environment; see --help" >&2; exit 2 ;;
  esac
fi
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${ISLANDS_BIN:-$here/target/release/islands}
[ -x "$bin" ] || { echo "error: $bin not built (cargo build --release), or set ISLANDS_BIN" >&2; exit 2; }
rounds=${ROUNDS:-3}
duration=${DURATION:-5}
warmup=${WARMUP:-1}
islands=${ISLANDS:-per-core}
transports=${TRANSPORTS:-inproc shm uds procs-shm procs-uds}
multisite=${MULTISITE:-0 20 50 100}
modes=${MODES:-read update}
durabilities=${DURABILITY:-off sync}
extra=${EXTRA:-}
case $rounds in ''|*[!0-9]*|0) echo "error: ROUNDS=$rounds is not a positive whole number" >&2; exit 2 ;; esac
case " $transports " in *" inproc "*) ;; *) echo "error: TRANSPORTS must include inproc (the ratios' base)" >&2; exit 2 ;; esac
for t in $transports; do
  case $t in inproc|shm|uds|procs-shm|procs-uds) ;; *) echo "error: unknown transport '$t' in TRANSPORTS" >&2; exit 2 ;; esac
done
for m in $modes; do
  case $m in read|update) ;; *) echo "error: unknown mode '$m' in MODES (read, update)" >&2; exit 2 ;; esac
done
out=${OUT:-$(mktemp -d -t islands-sweep-XXXXXX)}
mkdir -p "$out"
echo "# results in $out" >&2

runs=0
failed=0
for dur in $durabilities; do
  for mode in $modes; do
    for ms in $multisite; do
      for r in $(seq 1 "$rounds"); do
        # inproc first, then the others, at the same point.
        for t in inproc $(echo "$transports" | tr ' ' '\n' | grep -vx inproc || true); do
          name="$dur-$mode-$ms-$t-$r"
          case $t in
            procs-*) how=(--processes --transport "${t#procs-}") ;;
            *) how=(--transport "$t") ;;
          esac
          upd=()
          [ "$mode" = update ] && upd=(--update)
          echo "# $name" >&2
          runs=$((runs + 1))
          # shellcheck disable=SC2086
          if ! "$bin" bench --islands "$islands" --durability "$dur" "${how[@]}" \
              --warmup "$warmup" --duration "$duration" --progress quiet \
              --json "$out/$name.json" $extra \
              micro --n 10 "${upd[@]}" --multisite "$ms" >/dev/null 2>"$out/$name.err"; then
            failed=$((failed + 1))
            echo "#   failed: $(tail -n 3 "$out/$name.err" | tr '\n' ' ')" >&2
            rm -f "$out/$name.json"
          else
            rm -f "$out/$name.err"
          fi
        done
      done
    done
  done
done

python3 - "$out" "$rounds" "$transports" "$multisite" "$modes" "$durabilities" <<'PY'
import csv, json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
transports = ["inproc"] + [t for t in sys.argv[3].split() if t != "inproc"]
multisite, modes, durs = sys.argv[4].split(), sys.argv[5].split(), sys.argv[6].split()

def load(dur, mode, ms, t, r):
    p = f"{out}/{dur}-{mode}-{ms}-{t}-{r}.json"
    return json.load(open(p)) if os.path.exists(p) else None

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def per_dc(rep, key):
    x = (rep or {}).get("traffic") or {}
    return x.get(key) if x.get("distributed_commits") else None

def fmt(v, spec):
    return "-" if v is None else format(v, spec)

rows = []
print(f"{'durability':<10} {'mode':<6} {'multi':>5}  {'transport':<10} {'txn/s':>12} {'ratio':>6}"
      f" {'frames/dc':>9} {'batches/dc':>10} {'syscalls/dc':>11}  rounds")
for dur in durs:
    for mode in modes:
        for ms in multisite:
            base = [load(dur, mode, ms, "inproc", r) for r in range(1, rounds + 1)]
            for t in transports:
                reps = [load(dur, mode, ms, t, r) for r in range(1, rounds + 1)]
                tps = [x["throughput_tps"] if x else None for x in reps]
                ratios = [x / b["throughput_tps"] if x is not None and b and b["throughput_tps"] > 0 else None
                          for x, b in zip(tps, base)]
                sc = [None if per_dc(x, "send_syscalls_per_distributed_commit") is None else
                      per_dc(x, "send_syscalls_per_distributed_commit") + per_dc(x, "recv_syscalls_per_distributed_commit")
                      for x in reps]
                row = {
                    "durability": dur, "mode": mode, "multisite_pct": ms, "transport": t,
                    "tps_median": median(tps), "ratio_median": median(ratios),
                    "frames_per_dc": median([per_dc(x, "frames_per_distributed_commit") for x in reps]),
                    "batches_per_dc": median([per_dc(x, "batches_per_distributed_commit") for x in reps]),
                    "syscalls_per_dc": median(sc),
                    "rounds_ok": sum(x is not None for x in reps),
                }
                rows.append(row)
                print(f"{dur:<10} {mode:<6} {ms + '%':>5}  {t:<10} {fmt(row['tps_median'], ',.0f'):>12}"
                      f" {fmt(row['ratio_median'], '.3f'):>6} {fmt(row['frames_per_dc'], '.2f'):>9}"
                      f" {fmt(row['batches_per_dc'], '.2f'):>10} {fmt(row['syscalls_per_dc'], '.2f'):>11}"
                      f"  {row['rounds_ok']}/{rounds}")
with open(f"{out}/summary.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["transport"])
    w.writeheader()
    w.writerows(rows)
# The host's cross-core round trip before each run (docs/measuring.md):
# rounds whose readings differ ran in different host states.
probes = []
for name in sorted(os.listdir(out)):
    if name.endswith(".json"):
        h = json.load(open(f"{out}/{name}")).get("host")
        if h:
            probes.append(h["round_trip_ns_before"])
if probes:
    print(f"host probe ns before the runs: min {min(probes)}, median {statistics.median(probes):.0f}, max {max(probes)}")
PY
echo "# $runs runs, $failed failed; results in $out" >&2
[ "$failed" -eq 0 ]
