#!/usr/bin/env bash
# TPC-B side by side: the distribution's PostgreSQL and `islands serve`, both
# driven by pgbench on this machine, both durable before they answer.
#
# usage: scripts/compare-postgres.sh [SCALE] [SECONDS] [CLIENTS ...]
# example: scripts/compare-postgres.sh 16 10 16 64
#
# PostgreSQL runs from a throwaway data directory (initdb, synchronous_commit
# = on, fsync on), loaded with `pgbench -i -s SCALE`; islands serve runs
# `--init tpcb --scale SCALE` with durability sync. For each client count the
# runs alternate between the servers (only pgbench loads the machine):
#   pg-builtin   pgbench's built-in tpcb-like script (five statements)
#   pg-function  a PL/pgSQL function doing the same transaction in one call
#   islands      CALL tpcb(...)
#   is-builtin   pgbench's built-in tpcb-like script, unchanged, against islands
#                (a transaction block of five statements on pgbench_* tables)
#   pg-select / islands-select: pgbench -S, and CALL tpcb_balance(...)
#   is-select    pgbench -S (the built-in select-only script) against islands
# Each line gives tps, mean and p99 latency (from pgbench's per-transaction
# log), and failed transactions; the ratios islands / PostgreSQL follow.
set -euo pipefail
scale=${1:-16}
secs=${2:-10}
shift $(( $# < 2 ? $# : 2 ))
clients=${*:-16 64}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${ISLANDS_BIN:-$here/target/release/islands}
[ -x "$bin" ] || { echo "error: $bin not built (cargo build --release)" >&2; exit 2; }
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$pgbin" ] && [ -x "$pgbin/postgres" ] || { echo "error: no PostgreSQL server (apt-get install postgresql)" >&2; exit 2; }
command -v pgbench >/dev/null || { echo "error: pgbench not on PATH (apt-get install postgresql-client)" >&2; exit 2; }
pgport=${PGPORT_COMPARE:-54329}
isport=${ISLANDS_PORT_COMPARE:-54330}

work=$(mktemp -d /tmp/islands-vs-pg.XXXXXX)
chmod 755 "$work"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
islands_pid=
cleanup() {
  [ -n "$islands_pid" ] && kill -TERM "$islands_pid" 2>/dev/null && wait "$islands_pid" 2>/dev/null || true
  as_pg "$pgbin/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

mkdir "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres "$work/pg"
as_pg "$pgbin/initdb" -D "$work/pg" --auth=trust -U postgres >/dev/null
as_pg "$pgbin/pg_ctl" -D "$work/pg" -l "$work/pg/log" -w start -o \
  "-p $pgport -k $work/pg -c listen_addresses=127.0.0.1 -c synchronous_commit=on -c fsync=on \
   -c max_connections=300 -c shared_buffers=512MB" >/dev/null
pg=(-h 127.0.0.1 -p "$pgport" -U postgres)
pgbench "${pg[@]}" -i -q -s "$scale" postgres >/dev/null 2>&1
psql "${pg[@]}" -q postgres >/dev/null <<'SQL'
CREATE FUNCTION tpcb(p_aid int, p_tid int, p_bid int, p_delta int) RETURNS int AS $$
DECLARE bal int;
BEGIN
  UPDATE pgbench_accounts SET abalance = abalance + p_delta WHERE aid = p_aid;
  SELECT abalance INTO bal FROM pgbench_accounts WHERE aid = p_aid;
  UPDATE pgbench_tellers SET tbalance = tbalance + p_delta WHERE tid = p_tid;
  UPDATE pgbench_branches SET bbalance = bbalance + p_delta WHERE bid = p_bid;
  INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (p_tid, p_bid, p_aid, p_delta, CURRENT_TIMESTAMP);
  RETURN bal;
END $$ LANGUAGE plpgsql;
SQL

"$bin" serve --init tpcb --scale "$scale" --data-dir "$work/islands" \
  --listen "127.0.0.1:$isport" --max-connections 300 >"$work/islands.out" 2>&1 &
islands_pid=$!
for _ in $(seq 1 600); do grep -q "ready on" "$work/islands.out" 2>/dev/null && break; sleep 0.1; done
grep -q "ready on" "$work/islands.out" || { cat "$work/islands.out" >&2; exit 1; }
is=(-h 127.0.0.1 -p "$isport" -U islands)

vars="\\set aid random(1, 100000 * $scale)
\\set bid random(1, $scale)
\\set tid random(1, 10 * $scale)
\\set delta random(-5000, 5000)"
printf '%s\nSELECT tpcb(:aid, :tid, :bid, :delta);\n' "$vars" >"$work/fn.sql"
printf '%s\nCALL tpcb(:aid, :tid, :bid, :delta);\n' "$vars" >"$work/call.sql"
printf '\\set aid random(1, 100000 * %s)\nCALL tpcb_balance(:aid);\n' "$scale" >"$work/sel.sql"

# run NAME CLIENTS pgbench-args...: one pgbench run, one result line.
run() {
  local name=$1 c=$2
  shift 2
  local logdir="$work/log-$name-$c"
  mkdir -p "$logdir"
  local out
  out=$(cd "$logdir" && pgbench -n -M prepared -c "$c" -j 2 -T "$secs" -l "$@" 2>&1) || {
    echo "$out" >&2
    return 1
  }
  python3 - "$name" "$c" "$logdir" <<PY
import glob, sys, re
name, c, d = sys.argv[1], sys.argv[2], sys.argv[3]
out = """$out"""
tps = float(re.search(r"tps = ([0-9.]+)", out).group(1))
failed = re.search(r"number of failed transactions: (\d+)", out)
lat = []
for f in glob.glob(d + "/pgbench_log.*"):
    for line in open(f):
        p = line.split()
        if len(p) > 2 and p[2].isdigit():
            lat.append(int(p[2]))
lat.sort()
p99 = lat[int((len(lat) - 1) * 0.99)] / 1000 if lat else 0
mean = sum(lat) / len(lat) / 1000 if lat else 0
print(f"{name:15} clients {c:>3}  tps {tps:10.0f}  mean {mean:8.2f} ms  p99 {p99:8.2f} ms  failed {failed.group(1) if failed else '?'}")
PY
  rm -rf "$logdir"
}

echo "scale $scale, $secs s per run, pgbench -M prepared -j 2; PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') synchronous_commit=on; islands serve durability sync"
results="$work/results"
for c in $clients; do
  {
    run pg-builtin "$c" -b tpcb-like "${pg[@]}" postgres
    run islands "$c" -f "$work/call.sql" "${is[@]}" islands
    run pg-function "$c" -f "$work/fn.sql" "${pg[@]}" postgres
    run pg-select "$c" -b select-only "${pg[@]}" postgres
    run islands-select "$c" -f "$work/sel.sql" "${is[@]}" islands
    run is-builtin "$c" -b tpcb-like "${is[@]}" islands
    run is-select "$c" -b select-only "${is[@]}" islands
  } | tee -a "$results"
done
python3 - "$results" <<'PY'
import sys, collections
r = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    p = line.split()
    r[int(p[2])][p[0]] = (float(p[4]), float(p[9]))
for c in sorted(r):
    d = r[c]
    def ratio(a, b, i):
        return d[a][i] / d[b][i] if d.get(a) and d.get(b) and d[b][i] else float("nan")
    print(f"clients {c:>3}: tps islands/pg-builtin {ratio('islands', 'pg-builtin', 0):.2f}, "
          f"islands/pg-function {ratio('islands', 'pg-function', 0):.2f}, "
          f"select islands/pg {ratio('islands-select', 'pg-select', 0):.2f}; "
          f"p99 islands/pg-builtin {ratio('islands', 'pg-builtin', 1):.2f}")
    print(f"clients {c:>3}: pgbench's own scripts on both: tpcb-like islands/pg {ratio('is-builtin', 'pg-builtin', 0):.2f} "
          f"(p99 {ratio('is-builtin', 'pg-builtin', 1):.2f}), select-only islands/pg {ratio('is-select', 'pg-select', 0):.2f}")
PY
