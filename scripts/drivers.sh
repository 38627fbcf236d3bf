#!/usr/bin/env bash
# The driver matrix: psycopg 3 + psycopg_pool, asyncpg + Pool, pgx v5 + pgxpool
# (tests/drivers/) against `islands serve --init bank --accounts 1000 --islands 2
# --durability async`, with a second small server (`--init ycsb --rows 1000`)
# for arrays. Picks free ports, waits for each ready line, runs each driver
# (each prints PASS/FAIL per check), stops the servers with SIGTERM, then runs
# `islands check` on the bank server's directory.
#
#   scripts/drivers.sh [DRIVER...]    DRIVER: psycopg asyncpg pgx (default: all)
#
# Install the drivers first with .ci/drivers-setup.sh. Exits non-zero if any
# check of any driver failed, a driver could not run, or `islands check` failed.
# Environment: ISLANDS (the binary; default target/release/islands, built if
# missing), DRIVERS_VENV (default target/drivers-venv).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${DRIVERS_VENV:-$root/target/drivers-venv}
bin=${ISLANDS:-$root/target/release/islands}
drivers=("$@")
[ ${#drivers[@]} -gt 0 ] || drivers=(psycopg asyncpg pgx)
if [ ! -x "$bin" ]; then
  cargo build --release -q -p islands-cli || exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/islands-drivers.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME ARGS...: starts a server, waits for its ready line (60 s at most);
# sets `port` and `pid`.
start() {
  local name=$1; shift
  port=$(free_port)
  "$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/$name" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 600); do
    if grep -q "ready on" "$work/$name.out" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "drivers: the $name server did not start:" >&2
  cat "$work/$name.out" "$work/$name.err" >&2
  return 1
}

# stop NAME PID: SIGTERM, then waits for the server to stop (30 s at most).
stop() {
  kill -TERM "$2" 2>/dev/null || return 0
  for _ in $(seq 300); do
    kill -0 "$2" 2>/dev/null || { wait "$2"; return $?; }
    sleep 0.1
  done
  echo "drivers: the $1 server did not stop in 30 s" >&2
  kill -KILL "$2" 2>/dev/null
  return 1
}

start bank --init bank --accounts 1000 --islands 2 --durability async --no-pin || exit 1
bank_port=$port bank_pid=$pid
start ycsb --init ycsb --rows 1000 --durability off --no-pin || exit 1
ycsb_port=$port ycsb_pid=$pid
export ISLANDS_DSN="postgresql://drivers@127.0.0.1:$bank_port/islands"
export ISLANDS_ARRAY_DSN="postgresql://drivers@127.0.0.1:$ycsb_port/islands"
export ISLANDS_ACCOUNTS=1000
echo "drivers: bank on port $bank_port, ycsb (arrays) on port $ycsb_port"

status=0
ran=()
for d in "${drivers[@]}"; do
  t0=$SECONDS
  case $d in
    psycopg) cmd=("$venv/bin/python" tests/drivers/psycopg_check.py) ;;
    asyncpg) cmd=("$venv/bin/python" tests/drivers/asyncpg_check.py) ;;
    pgx) cmd=(bash -c 'cd tests/drivers/go && go run .') ;;
    *) echo "drivers: unknown driver $d (psycopg, asyncpg, pgx)"; status=1; continue ;;
  esac
  if [ "$d" != pgx ] && [ ! -x "$venv/bin/python" ]; then
    echo "FAIL $d: not installed (run .ci/drivers-setup.sh)"; status=1; continue
  fi
  if [ "$d" = pgx ] && ! command -v go >/dev/null 2>&1; then
    echo "FAIL $d: go is not installed"; status=1; continue
  fi
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$root/tests/drivers timeout 300 "${cmd[@]}"
  rc=$?
  [ $rc -eq 0 ] || status=1
  ran+=("$d: exit $rc in $((SECONDS - t0)) s")
done

stop ycsb "$ycsb_pid" || status=1
if ! stop bank "$bank_pid"; then
  echo "drivers: the bank server did not stop cleanly:" >&2
  tail -5 "$work/bank.err" >&2
  status=1
fi
pids=()
if "$bin" check --log-dir "$work/bank" >"$work/check.out" 2>&1; then
  echo "drivers: islands check: ok"
else
  echo "drivers: islands check FAILED:"
  cat "$work/check.out"
  status=1
fi
printf 'drivers: %s\n' "${ran[@]}"
exit $status
