#!/usr/bin/env bash
# Installs what tests/drivers/ needs, from the package registries only:
#   - a Python venv (target/drivers-venv) with psycopg 3 (binary), psycopg_pool and asyncpg;
#   - the Go modules of tests/drivers/go (pgx v5 with pgxpool), into Go's module cache.
# Each step prints how long it took. Exits non-zero if a driver could not be installed,
# naming it, so scripts/drivers.sh is never run against half a matrix without saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${DRIVERS_VENV:-target/drivers-venv}
failed=()
step() { # step NAME COMMAND...: runs COMMAND, prints its time, records a failure
  local name=$1; shift
  local t0=$SECONDS
  if "$@"; then echo "drivers-setup: $name: ok in $((SECONDS - t0)) s"
  else echo "drivers-setup: $name: FAILED after $((SECONDS - t0)) s"; failed+=("$name"); fi
}
python_drivers() {
  { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } &&
    "$venv/bin/python" -m pip install -q --disable-pip-version-check \
      'psycopg[binary]>=3.1' 'psycopg-pool>=3.1' 'asyncpg>=0.29'
}
go_drivers() {
  command -v go >/dev/null 2>&1 || { echo "go is not installed"; return 1; }
  (cd tests/drivers/go && go mod download && go build -o /dev/null .)
}
step "python (psycopg 3, psycopg_pool, asyncpg)" python_drivers
step "go (pgx v5, pgxpool)" go_drivers
if [ ${#failed[@]} -gt 0 ]; then
  echo "drivers-setup: could not install: ${failed[*]}"
  exit 1
fi
