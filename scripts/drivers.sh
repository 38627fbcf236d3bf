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
# check of any driver failed (other than those DRIVERS_XFAIL expects to fail),
# a driver could not run, or `islands check` failed.
# Environment: ISLANDS (the binary; default target/release/islands, built if
# missing), DRIVERS_VENV (default target/drivers-venv), DRIVERS_XFAIL: checks
# expected to fail, separated by spaces, each the start of a check's name with
# `_` for a space (`block` is every check whose name starts with "block"),
# optionally after `DRIVER:` (`asyncpg:cursor_in_a_block`), or `islands_check`
# for the check of the bank server's directory. Such a check that fails
# prints XFAIL and does not fail the run; one that passes prints XPASS.
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

# classify DRIVER: reads a driver's output and prints it with each FAIL of
# a check DRIVERS_XFAIL names turned into XFAIL (a PASS of one into XPASS),
# the driver's own summary replaced by one that counts them, and a last line
# `counts PASSED FAILED XFAILED`.
classify() {
  awk -v d="$1" -v xfail="${DRIVERS_XFAIL:-}" '
    BEGIN { n = split(xfail, xs, " ") }
    function expected(name,   key, i, x) {
      key = name; gsub(/ /, "_", key)
      for (i = 1; i <= n; i++) {
        x = xs[i]
        if (index(x, ":")) { if (substr(x, 1, length(d) + 1) != d ":") continue; x = substr(x, length(d) + 2) }
        if (x != "" && substr(key, 1, length(x)) == x) return 1
      }
      return 0
    }
    # The check name: after "PASS DRIVER ", up to ": " (the reason) on a FAIL.
    function check(line, kind,   rest, at) {
      rest = substr(line, length(kind) + length(d) + 3)
      if (kind == "FAIL") { at = index(rest, ": "); if (at) rest = substr(rest, 1, at - 1) }
      return rest
    }
    index($0, "PASS " d " ") == 1 {
      if (expected(check($0, "PASS"))) { print "XPASS" substr($0, 5) " (DRIVERS_XFAIL expected it to fail)" }
      else print
      pass++; next
    }
    index($0, "FAIL " d " ") == 1 {
      if (expected(check($0, "FAIL"))) { print "XFAIL" substr($0, 5); xfailed++ }
      else { print; failed++ }
      next
    }
    index($0, d ": ") == 1 && ($0 ~ / passed, [0-9]+ failed$/ || index($0, d ": failed: ") == 1) { next }
    $0 == "exit status 1" { next }
    { print }
    END {
      printf "%s: %d passed, %d failed, %d expected to fail\n", d, pass, failed, xfailed
      printf "counts %d %d %d\n", pass, failed, xfailed
    }'
}

# The go command .ci/drivers-setup.sh found or fetched, else the machine's.
go=$(cat target/drivers-go 2>/dev/null || command -v go || true)

status=0
ran=()
total_pass=0 total_fail=0 total_xfail=0
for d in "${drivers[@]}"; do
  t0=$SECONDS
  case $d in
    psycopg) cmd=("$venv/bin/python" tests/drivers/psycopg_check.py) ;;
    asyncpg) cmd=("$venv/bin/python" tests/drivers/asyncpg_check.py) ;;
    pgx) cmd=(bash -c 'cd tests/drivers/go && "$0" run .' "$go") ;;
    *) echo "drivers: unknown driver $d (psycopg, asyncpg, pgx)"; status=1; continue ;;
  esac
  if [ "$d" != pgx ] && [ ! -x "$venv/bin/python" ]; then
    echo "FAIL $d: not installed (run .ci/drivers-setup.sh)"; status=1; continue
  fi
  if [ "$d" = pgx ] && [ -z "$go" ]; then
    echo "FAIL $d: go is not installed (run .ci/drivers-setup.sh)"; status=1; continue
  fi
  PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$root/tests/drivers timeout 300 "${cmd[@]}" \
    >"$work/$d.log" 2>&1
  rc=$?
  classify "$d" <"$work/$d.log" >"$work/$d.classified"
  grep -v '^counts ' "$work/$d.classified"
  read -r _ p f x < <(grep '^counts ' "$work/$d.classified")
  total_pass=$((total_pass + p)) total_fail=$((total_fail + f)) total_xfail=$((total_xfail + x))
  # A driver exits 1 when a check failed; any other exit, or an exit 1 with
  # no failed check printed, is a driver that could not run its checks.
  if [ "$f" -gt 0 ] || { [ $rc -ne 0 ] && { [ $rc -ne 1 ] || [ $((f + x)) -eq 0 ]; }; }; then
    status=1
  fi
  ran+=("$d: exit $rc in $((SECONDS - t0)) s")
done

stop ycsb "$ycsb_pid" || status=1
if ! stop bank "$bank_pid"; then
  echo "drivers: the bank server did not stop cleanly:" >&2
  tail -5 "$work/bank.err" >&2
  status=1
fi
pids=()
xfail_check=0
case " ${DRIVERS_XFAIL:-} " in *" islands_check "*) xfail_check=1 ;; esac
if "$bin" check --log-dir "$work/bank" >"$work/check.out" 2>&1; then
  if [ $xfail_check -eq 1 ]; then
    echo "XPASS drivers: islands check: ok (DRIVERS_XFAIL expected it to fail)"
  else
    echo "drivers: islands check: ok"
  fi
elif [ $xfail_check -eq 1 ]; then
  echo "XFAIL drivers: islands check failed:"
  sed 's/^/  /' "$work/check.out"
else
  echo "drivers: islands check FAILED:"
  cat "$work/check.out"
  status=1
fi
printf 'drivers: %s\n' "${ran[@]}"
if [ $total_xfail -gt 0 ]; then
  echo "drivers: $total_xfail check(s) failed as DRIVERS_XFAIL expects: not counted below"
fi
echo "drivers: $total_pass passed, $total_fail failed"
exit $status
