#!/usr/bin/env bash
# Installs what tests/drivers/ needs, from the package registries only:
#   - a Python venv (target/drivers-venv) with psycopg 3 (binary), psycopg_pool and asyncpg;
#   - the Go modules of tests/drivers/go (pgx v5 with pgxpool), into Go's module cache,
#     with Go itself if the machine has none new enough (see find_go); the go
#     command found is written to target/drivers-go for scripts/drivers.sh.
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
# The Go toolchain tests/drivers/go/go.mod asks for at least (its `go` line).
go_needed=$(awk '$1 == "go" { print $2; exit }' tests/drivers/go/go.mod)
# The toolchain taken from the Go module proxy when the machine's Go is older.
go_fetched=go1.27.3
# older A B: whether Go version A (1.19.8) is older than B (1.23.0).
older() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }
go_version() { "$1" env GOVERSION 2>/dev/null | sed 's/^go//'; }
# Finds a Go of at least $go_needed: the machine's (PATH, /usr/local/go),
# else Debian's golang-go; if that one is older (Debian 12 has 1.19), the
# $go_fetched toolchain from the Go module proxy (golang.org/toolchain),
# unpacked into target/go-toolchain. Prints the go command to use.
find_go() {
  local go v
  go=$(command -v go || { [ -x /usr/local/go/bin/go ] && echo /usr/local/go/bin/go; }) || true
  if [ -z "$go" ] && command -v apt-get >/dev/null 2>&1; then
    { timeout 300 apt-get install -y golang-go >/dev/null 2>&1 ||
      { timeout 120 apt-get update >/dev/null 2>&1 && timeout 300 apt-get install -y golang-go >/dev/null 2>&1; }; } &&
      go=$(command -v go)
  fi
  [ -n "$go" ] || { echo "no go, and golang-go could not be installed" >&2; return 1; }
  v=$(go_version "$go")
  if ! older "$v" "$go_needed"; then echo "$go"; return 0; fi
  local dir=$PWD/target/go-toolchain
  if [ ! -x "$dir/bin/go" ]; then
    echo "go $v is older than $go_needed: fetching $go_fetched through the Go module proxy" >&2
    local arch mod zip tmp
    arch=$("$go" env GOOS)-$("$go" env GOARCH)
    mod=golang.org/toolchain@v0.0.1-$go_fetched.$arch
    tmp=$(mktemp -d)
    # The download is unpacked without execute bits by Go before 1.21, so the
    # zip itself is unpacked here.
    zip=$(cd "$tmp" && GOFLAGS=-mod=mod "$go" mod download -json "$mod" | awk -F'"' '$2 == "Zip" { print $4 }') &&
      rm -rf "$dir" && python3 - "$zip" "$dir" "$mod" <<'PY'
import os, sys, zipfile
src, dst, prefix = sys.argv[1], sys.argv[2], sys.argv[3] + "/"
with zipfile.ZipFile(src) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        out = os.path.join(dst, info.filename[len(prefix):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as f, open(out, "wb") as g:
            g.write(f.read())
        mode = info.external_attr >> 16
        rel = info.filename[len(prefix):]
        executable = rel.startswith("bin/") or rel.startswith("pkg/tool/")
        os.chmod(out, 0o755 if executable or mode & 0o111 else 0o644)
PY
    local rc=$?
    rm -rf "$tmp"
    [ $rc -eq 0 ] || { echo "could not fetch $go_fetched" >&2; return 1; }
  fi
  echo "$dir/bin/go"
}
go_drivers() {
  local go
  go=$(find_go) || return 1
  echo "drivers-setup: using $go ($(go_version "$go"))"
  mkdir -p target && echo "$go" >target/drivers-go
  (cd tests/drivers/go && "$go" mod download && "$go" build -o /dev/null .)
}
step "python (psycopg 3, psycopg_pool, asyncpg)" python_drivers
step "go (pgx v5, pgxpool)" go_drivers
if [ ${#failed[@]} -gt 0 ]; then
  echo "drivers-setup: could not install: ${failed[*]}"
  exit 1
fi
