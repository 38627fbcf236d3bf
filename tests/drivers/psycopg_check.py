"""psycopg 3 with psycopg_pool against `islands serve --init bank`: see checks.py.

psycopg's defaults are kept: autocommit off (every statement inside a block
psycopg opens), server-side binding of parameters, binary int2[] for small
Python ints in a list.
"""

import threading
import time

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from checks import ARRAY_DSN, DSN, OPENING, Matrix, expect

# Transfer ids this driver uses (each driver its own range).
TID = 1_000_000
# Accounts this driver changes (each driver its own).
A, B, C = 100, 101, 102


def balance(conn, account):
    with conn.transaction():
        row = conn.execute("SELECT * FROM bank_balance(%s)", (account,)).fetchone()
    return row[0]


def sql_state(fn):
    try:
        fn()
    except psycopg.Error as e:
        return e.sqlstate
    return None


def check_connect(pool):
    with pool.connection() as conn:
        expect(conn.execute("SELECT 1").fetchone()[0] == 1, "SELECT 1 is not 1")
        v = conn.execute("SELECT version()").fetchone()[0]
        expect("islands" in v.lower() or "postgresql" in v.lower(), f"version() = {v!r}")


def check_pool_concurrent(pool):
    total0 = None
    with pool.connection() as conn:
        total0 = conn.execute("SELECT * FROM bank_total()").fetchone()[0]
    errors_seen = []

    def worker(i):
        try:
            with pool.connection() as conn:
                for k in range(10):
                    conn.execute(
                        "CALL transfer(%s, %s, %s, %s)",
                        (TID + 100 + i * 10 + k, 200 + i, 210 + i, 1),
                    )
                    conn.commit()
        except Exception as e:  # reported below
            errors_seen.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(not errors_seen, f"pool workers failed: {errors_seen[:2]}")
    with pool.connection() as conn:
        total = conn.execute("SELECT * FROM bank_total()").fetchone()[0]
        # Ends the block psycopg opened (autocommit is off): `balance`'s
        # `transaction()` inside it would be a SAVEPOINT, which is refused.
        conn.commit()
        # Conserved across the transfers; the opening sum is `islands check`'s to check,
        # so a check that failed before this one does not fail it too.
        expect(total == total0, f"total {total0} then {total}")
        expect(balance(conn, 210) == OPENING + 10, "account 210 did not get its 10 transfers")


def check_block_committed(pool):
    with pool.connection() as conn:
        a0, b0 = balance(conn, A), balance(conn, B)
        with conn.transaction():
            expect(
                conn.info.transaction_status == TransactionStatus.INTRANS,
                f"inside a block the status is {conn.info.transaction_status.name}, not INTRANS",
            )
            conn.execute("CALL transfer(%s, %s, %s, %s)", (TID + 1, A, B, 5))
            conn.execute("CALL transfer(%s, %s, %s, %s)", (TID + 2, A, B, 6))
        expect(conn.info.transaction_status == TransactionStatus.IDLE, "not idle after COMMIT")
        a1, b1 = balance(conn, A), balance(conn, B)
        expect((a1, b1) == (a0 - 11, b0 + 11), f"after commit {a0},{b0} -> {a1},{b1}")


def check_block_rolled_back(pool):
    with pool.connection() as conn:
        c0 = balance(conn, C)
        try:
            with conn.transaction():
                conn.execute("CALL transfer(%s, %s, %s, %s)", (TID + 3, C, A, 50))
                conn.execute("UPDATE accounts SET balance = balance + 7 WHERE id = %s", (C,))
                raise psycopg.Rollback()
        except psycopg.Rollback:
            pass
        c1 = balance(conn, C)
        expect(c1 == c0, f"ROLLBACK left changes: balance {c0} -> {c1}")
        # The transfer id is free again: nothing of the block was kept.
        with conn.transaction():
            conn.execute("CALL transfer(%s, %s, %s, %s)", (TID + 3, C, A, 1))
        expect(balance(conn, C) == c0 - 1, "the transfer after the rollback did not apply")


def check_error_in_block(pool):
    with pool.connection() as conn:
        try:
            with conn.transaction():
                code = sql_state(lambda: conn.execute("CALL no_such_procedure(1)"))
                expect(code == "42883", f"unknown procedure: {code}, not 42883")
                code = sql_state(lambda: conn.execute("SELECT 1"))
                expect(code == "25P02", f"after an error in a block: {code}, not 25P02")
                raise psycopg.Rollback()
        except psycopg.Rollback:
            pass
        expect(conn.execute("SELECT 1").fetchone()[0] == 1, "not usable after ROLLBACK")


def check_errors(pool):
    with pool.connection() as conn:
        conn.autocommit = True
        cases = [
            ("CALL no_such_procedure(1)", None, "42883"),
            ("CALL transfer(%s, %s, %s, %s)", (TID + 4, A, B, 10**9), "P0001"),
            ("SELEC 1", None, "42601"),
            ("SELECT balance FROM no_such_table WHERE id = 1", None, "42P01"),
            ("SELECT no_such_column FROM accounts WHERE id = 1", None, "42703"),
            ("SAVEPOINT s1", None, "0A000"),
        ]
        for sql, args, want in cases:
            code = sql_state(lambda: conn.execute(sql, args))
            expect(code == want, f"{sql!r}: {code}, not {want}")


def check_parameters(pool):
    with pool.connection() as conn:
        conn.autocommit = True
        # Server-side binding (extended protocol) and client-side (simple).
        for cur in (conn.cursor(), psycopg.ClientCursor(conn)):
            row = cur.execute("SELECT * FROM bank_balance(%s)", (A,)).fetchone()
            expect(isinstance(row[0], int), f"bank_balance: {row!r}")
        # A quoted literal takes the parameter's type.
        row = conn.execute("CALL bank_balance('1')").fetchone()
        expect(row is not None, "CALL bank_balance('1') returned nothing")
        row = conn.execute("SELECT * FROM bank_balance(1::int8) AS result").fetchone()
        expect(row is not None, "an alias on a function call returned nothing")


def check_arrays(_pool):
    if not ARRAY_DSN:
        raise AssertionError("ISLANDS_ARRAY_DSN is not set (scripts/drivers.sh sets it)")
    with psycopg.connect(ARRAY_DSN, autocommit=True) as conn:
        # Small ints: psycopg sends a binary int2[].
        rows = conn.execute("SELECT * FROM ycsb_multi_read(%s)", ([1, 2, 3],)).fetchall()
        expect(sorted(r[0] for r in rows) == [1, 2, 3], f"int2[]: {rows!r}")
        big = [1, 2, 2**40]
        code = sql_state(lambda: conn.execute("SELECT * FROM ycsb_multi_read(%s)", (big,)))
        expect(code in (None, "P0001", "22003"), f"int8[] with a key out of range: {code}")
        rows = conn.execute("SELECT * FROM ycsb_multi_read('{4,5}')").fetchall()
        expect(sorted(r[0] for r in rows) == [4, 5], f"a text array: {rows!r}")


def check_sql_subset(pool):
    with pool.connection() as conn:
        conn.autocommit = True
        row = conn.execute("SELECT balance FROM accounts WHERE id = %s", (A,)).fetchone()
        expect(row is not None, "point SELECT found no account")
        a0 = row[0]
        n = conn.execute(
            "UPDATE accounts SET balance = balance + %s WHERE id = %s", (7, A)
        ).rowcount
        expect(n == 1, f"UPDATE counted {n} rows")
        a1 = conn.execute("SELECT balance FROM accounts WHERE id = %s", (A,)).fetchone()[0]
        expect(a1 == a0 + 7, f"after UPDATE +7: {a0} -> {a1}")
        conn.execute("UPDATE accounts SET balance = balance - 7 WHERE id = %s", (A,))
        # DELETE then INSERT the same account back with its balance.
        x = 990
        bx = conn.execute("SELECT balance FROM accounts WHERE id = %s", (x,)).fetchone()[0]
        n = conn.execute("DELETE FROM accounts WHERE id = %s", (x,)).rowcount
        expect(n == 1, f"DELETE counted {n} rows")
        gone = conn.execute("SELECT balance FROM accounts WHERE id = %s", (x,)).fetchone()
        expect(gone is None, f"a deleted row is still read: {gone!r}")
        n = conn.execute(
            "INSERT INTO accounts (id, balance) VALUES (%s, %s)", (x, bx)
        ).rowcount
        expect(n == 1, f"INSERT counted {n} rows")
        code = sql_state(
            lambda: conn.execute("INSERT INTO accounts (id, balance) VALUES (%s, 0)", (x,))
        )
        expect(code == "23505", f"a duplicate key: {code}, not 23505")
        back = conn.execute("SELECT balance FROM accounts WHERE id = %s", (x,)).fetchone()
        expect(back == (bx,), f"re-inserted row reads {back!r}, not ({bx},)")


def hold_lock(account, seconds, ready, failure):
    """Holds account's row in an open block for `seconds` (for cancel and
    timeouts); sets `ready` once it holds it, or records why it could not."""
    try:
        with psycopg.connect(DSN) as conn:
            conn.execute("UPDATE accounts SET balance = balance + 0 WHERE id = %s", (account,))
            ready.set()
            time.sleep(seconds)
            conn.rollback()
    except Exception as e:
        failure.append(repr(e))
        ready.set()


def blocked_update(pool, account, prepare, act):
    """Runs an UPDATE of `account` while another block holds it; `prepare(conn)`
    before, `act(conn)` while it waits; returns its SQLSTATE and seconds."""
    ready, failure = threading.Event(), []
    holder = threading.Thread(target=hold_lock, args=(account, 3.0, ready, failure))
    holder.start()
    try:
        expect(ready.wait(5), "the block holding the row did not start")
        expect(not failure, f"the block holding the row failed: {failure}")
        with pool.connection() as conn:
            conn.autocommit = True
            prepare(conn)
            t = threading.Timer(0.3, act, args=(conn,))
            t.start()
            t0 = time.monotonic()
            code = sql_state(
                lambda: conn.execute(
                    "UPDATE accounts SET balance = balance + 0 WHERE id = %s", (account,)
                )
            )
            took = time.monotonic() - t0
            t.join()
            conn.execute("RESET ALL")
            return code, took
    finally:
        holder.join()


def check_cancel(pool):
    code, took = blocked_update(pool, 300, lambda c: None, lambda c: c.cancel())
    expect(code == "57014", f"a cancelled statement answered {code}, not 57014")
    expect(took < 2.5, f"the cancel took {took:.1f} s")


def check_statement_timeout(pool):
    code, took = blocked_update(
        pool, 301, lambda c: c.execute("SET statement_timeout = 300"), lambda c: None
    )
    expect(code == "57014", f"a statement past statement_timeout answered {code}, not 57014")
    expect(took < 2.5, f"the timeout took {took:.1f} s")


def main():
    m = Matrix("psycopg")
    try:
        pool = ConnectionPool(DSN, min_size=1, max_size=4, timeout=10, open=True)
        pool.wait(timeout=10)
    except Exception as e:
        m.record("connect", repr(e))
        m.finish()
        return
    m.record("connect", None)
    with pool:
        for name, fn in [
            ("select 1 and version()", check_connect),
            ("pool: concurrent transfers", check_pool_concurrent),
            ("block committed", check_block_committed),
            ("block rolled back leaves nothing", check_block_rolled_back),
            ("error in a block, then 25P02", check_error_in_block),
            ("errors and their SQLSTATEs", check_errors),
            ("parameters", check_parameters),
            ("arrays", check_arrays),
            ("SQL subset on accounts", check_sql_subset),
            ("cancel", check_cancel),
            ("statement_timeout", check_statement_timeout),
        ]:
            m.run(name, fn, pool)
    m.finish()


if __name__ == "__main__":
    main()
