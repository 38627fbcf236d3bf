"""The driver matrix's shared pieces: each check is run, printed PASS or FAIL
with its reason, and the program exits non-zero if any failed.

The checks follow issue 30: connect and use the driver's pool; a transaction
block committed and one rolled back (the rollback leaves nothing); arrays,
parameters and errors with their SQLSTATEs; the SQL subset on the bank data
set's `accounts (id, balance)`; the driver's own cancel and statement timeout.

The server is the bank data set (`islands serve --init bank --accounts 1000`):
accounts 0..999, each opened with 1000; `transfer(id, src, dst, amount)`
records a transfer with a unique id; `bank_balance(account)`; `bank_total()`.
Arrays use a second server with the ycsb data set (`ycsb_multi_read(keys
int8[])`). Every change a check makes is undone or recorded as a transfer, so
`islands check` on the stopped directory still holds (a rollback that leaked
would show there too).
"""

import os
import sys
import time
import traceback

DSN = os.environ.get("ISLANDS_DSN", "postgresql://drivers@127.0.0.1:5433/islands")
ARRAY_DSN = os.environ.get("ISLANDS_ARRAY_DSN", "")
ACCOUNTS = int(os.environ.get("ISLANDS_ACCOUNTS", "1000"))
OPENING = 1000


class Failed(Exception):
    pass


def expect(cond, why):
    if not cond:
        raise Failed(why)


class Matrix:
    def __init__(self, driver):
        self.driver = driver
        self.passed = 0
        self.failed = []

    def record(self, name, error):
        if error is None:
            self.passed += 1
            print(f"PASS {self.driver} {name}", flush=True)
        else:
            self.failed.append(name)
            print(f"FAIL {self.driver} {name}: {error}", flush=True)

    def run(self, name, fn, *args):
        t0 = time.monotonic()
        try:
            fn(*args)
            self.record(name, None)
        except Failed as e:
            self.record(name, str(e))
        except Exception as e:  # a driver's error: its class, SQLSTATE and message
            self.record(name, describe(e))
        if os.environ.get("DRIVERS_VERBOSE"):
            print(f"  ({time.monotonic() - t0:.2f} s)")

    async def run_async(self, name, fn, *args):
        try:
            await fn(*args)
            self.record(name, None)
        except Failed as e:
            self.record(name, str(e))
        except Exception as e:
            self.record(name, describe(e))

    def finish(self):
        print(f"{self.driver}: {self.passed} passed, {len(self.failed)} failed", flush=True)
        if self.failed:
            print(f"{self.driver}: failed: {', '.join(self.failed)}", flush=True)
        sys.exit(1 if self.failed else 0)


def describe(e):
    code = getattr(e, "sqlstate", None)
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    where = "".join(traceback.format_tb(e.__traceback__, limit=-1)).strip().splitlines()
    at = where[0].strip() if where else ""
    return f"{type(e).__name__} [{code or 'no SQLSTATE'}] {text} ({at})"
