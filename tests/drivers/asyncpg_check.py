"""asyncpg with its Pool against `islands serve --init bank`: see checks.py.

asyncpg always prepares (extended protocol, binary results), introspects the
array types it is given (pg_type), resets each connection it takes back into
the pool (pg_advisory_unlock_all(), UNLISTEN *, RESET ALL, CLOSE ALL) and
cancels a statement whose `timeout` passes.
"""

import asyncio
import time

import asyncpg

from checks import ARRAY_DSN, DSN, OPENING, Matrix, expect

TID = 2_000_000
A, B, C = 110, 111, 112


async def balance(conn, account):
    return await conn.fetchval("SELECT * FROM bank_balance($1)", account)


async def sql_state(coro):
    try:
        await coro
    except asyncpg.PostgresError as e:
        return e.sqlstate
    return None


async def check_connect(pool):
    async with pool.acquire() as conn:
        expect(await conn.fetchval("SELECT 1") == 1, "SELECT 1 is not 1")
        v = await conn.fetchval("SELECT version()")
        expect("islands" in v.lower() or "postgresql" in v.lower(), f"version() = {v!r}")


async def check_pool_concurrent(pool):
    async with pool.acquire() as conn:
        total0 = await conn.fetchval("SELECT * FROM bank_total()")

    async def worker(i):
        for k in range(10):
            # Each call on a connection taken from the pool and given back:
            # the pool resets it every time.
            async with pool.acquire() as conn:
                await conn.execute(
                    "CALL transfer($1, $2, $3, $4)", TID + 100 + i * 10 + k, 220 + i, 230 + i, 1
                )

    await asyncio.gather(*(worker(i) for i in range(4)))
    async with pool.acquire() as conn:
        total = await conn.fetchval("SELECT * FROM bank_total()")
        # Conserved across the transfers; the opening sum is `islands check`'s to check,
        # so a check that failed before this one does not fail it too.
        expect(total == total0, f"total {total0} then {total}")
        expect(await balance(conn, 230) == OPENING + 10, "account 230 did not get its 10 transfers")


async def check_block_committed(pool):
    async with pool.acquire() as conn:
        a0, b0 = await balance(conn, A), await balance(conn, B)
        async with conn.transaction():
            expect(conn.is_in_transaction(), "the server does not say the block is open")
            await conn.execute("CALL transfer($1, $2, $3, $4)", TID + 1, A, B, 5)
            await conn.execute("CALL transfer($1, $2, $3, $4)", TID + 2, A, B, 6)
        expect(not conn.is_in_transaction(), "still in a block after COMMIT")
        a1, b1 = await balance(conn, A), await balance(conn, B)
        expect((a1, b1) == (a0 - 11, b0 + 11), f"after commit {a0},{b0} -> {a1},{b1}")


class Undo(Exception):
    pass


async def check_block_rolled_back(pool):
    async with pool.acquire() as conn:
        c0 = await balance(conn, C)
        try:
            async with conn.transaction():
                await conn.execute("CALL transfer($1, $2, $3, $4)", TID + 3, C, A, 50)
                await conn.execute("UPDATE accounts SET balance = balance + 7 WHERE id = $1", C)
                raise Undo()
        except Undo:
            pass
        c1 = await balance(conn, C)
        expect(c1 == c0, f"ROLLBACK left changes: balance {c0} -> {c1}")
        await conn.execute("CALL transfer($1, $2, $3, $4)", TID + 3, C, A, 1)
        expect(await balance(conn, C) == c0 - 1, "the transfer after the rollback did not apply")


async def check_cursor_in_block(pool):
    async with pool.acquire() as conn:
        async with conn.transaction():
            rows = [r async for r in conn.cursor("SELECT * FROM bank_balance($1)", A)]
        expect(len(rows) == 1, f"a cursor in a block read {rows!r}")


async def check_error_in_block(pool):
    async with pool.acquire() as conn:
        try:
            async with conn.transaction():
                code = await sql_state(conn.execute("CALL no_such_procedure(1)"))
                expect(code == "42883", f"unknown procedure: {code}, not 42883")
                code = await sql_state(conn.fetchval("SELECT 1"))
                expect(code == "25P02", f"after an error in a block: {code}, not 25P02")
                raise Undo()
        except Undo:
            pass
        expect(await conn.fetchval("SELECT 1") == 1, "not usable after ROLLBACK")


async def check_errors(pool):
    async with pool.acquire() as conn:
        cases = [
            ("CALL no_such_procedure(1)", (), "42883"),
            ("CALL transfer($1, $2, $3, $4)", (TID + 4, A, B, 10**9), "P0001"),
            ("SELEC 1", (), "42601"),
            ("SELECT balance FROM no_such_table WHERE id = 1", (), "42P01"),
            ("SELECT no_such_column FROM accounts WHERE id = 1", (), "42703"),
            ("SAVEPOINT s1", (), "0A000"),
        ]
        for sql, args, want in cases:
            code = await sql_state(conn.execute(sql, *args))
            expect(code == want, f"{sql!r}: {code}, not {want}")


async def check_parameters(pool):
    async with pool.acquire() as conn:
        v = await conn.fetchval("SELECT * FROM bank_balance($1)", A)
        expect(isinstance(v, int), f"bank_balance: {v!r}")
        v = await conn.fetchval("SELECT * FROM bank_balance($1::int8) AS result", A)
        expect(isinstance(v, int), f"a cast and an alias: {v!r}")
        # A wrong type is refused by the driver or the server, never run.
        try:
            await conn.fetchval("SELECT * FROM bank_balance($1)", "not a number")
            raise AssertionError("a text argument for an int8 parameter was accepted")
        except (asyncpg.DataError, asyncpg.PostgresError, TypeError):
            pass


async def check_arrays(_pool):
    if not ARRAY_DSN:
        raise AssertionError("ISLANDS_ARRAY_DSN is not set (scripts/drivers.sh sets it)")
    conn = await asyncpg.connect(ARRAY_DSN)
    try:
        rows = await conn.fetch("SELECT * FROM ycsb_multi_read($1)", [1, 2, 3])
        expect(sorted(r[0] for r in rows) == [1, 2, 3], f"int8[]: {rows!r}")
    finally:
        await conn.close()


async def check_sql_subset(pool):
    async with pool.acquire() as conn:
        a0 = await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", A)
        expect(a0 is not None, "point SELECT found no account")
        tag = await conn.execute("UPDATE accounts SET balance = balance + $1 WHERE id = $2", 7, A)
        expect(tag == "UPDATE 1", f"UPDATE answered {tag!r}")
        a1 = await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", A)
        expect(a1 == a0 + 7, f"after UPDATE +7: {a0} -> {a1}")
        await conn.execute("UPDATE accounts SET balance = balance - 7 WHERE id = $1", A)
        x = 991
        bx = await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", x)
        tag = await conn.execute("DELETE FROM accounts WHERE id = $1", x)
        expect(tag == "DELETE 1", f"DELETE answered {tag!r}")
        gone = await conn.fetchrow("SELECT balance FROM accounts WHERE id = $1", x)
        expect(gone is None, f"a deleted row is still read: {gone!r}")
        tag = await conn.execute("INSERT INTO accounts (id, balance) VALUES ($1, $2)", x, bx)
        expect(tag == "INSERT 0 1", f"INSERT answered {tag!r}")
        code = await sql_state(
            conn.execute("INSERT INTO accounts (id, balance) VALUES ($1, 0)", x)
        )
        expect(code == "23505", f"a duplicate key: {code}, not 23505")
        back = await conn.fetchval("SELECT balance FROM accounts WHERE id = $1", x)
        expect(back == bx, f"re-inserted row reads {back!r}, not {bx}")


async def blocked_update(pool, account, prepare, timeout):
    """An UPDATE of `account` while another block holds it: its SQLSTATE (or
    'timeout' for asyncpg's own) and seconds."""
    holder = await asyncpg.connect(DSN)
    tx = holder.transaction()
    await tx.start()
    try:
        await holder.execute("UPDATE accounts SET balance = balance + 0 WHERE id = $1", account)
        async with pool.acquire() as conn:
            await prepare(conn)
            t0 = time.monotonic()
            try:
                await conn.execute(
                    "UPDATE accounts SET balance = balance + 0 WHERE id = $1", account,
                    timeout=timeout,
                )
                code = None
            except asyncpg.PostgresError as e:
                code = e.sqlstate
            except asyncio.TimeoutError:
                code = "timeout"
            took = time.monotonic() - t0
            # The connection is usable after either.
            expect(await conn.fetchval("SELECT 1") == 1, "not usable after the cancel")
            return code, took
    finally:
        await tx.rollback()
        await holder.close()


async def check_cancel(pool):
    async def nothing(_):
        pass

    # asyncpg's timeout sends a CancelRequest and raises TimeoutError.
    code, took = await blocked_update(pool, 310, nothing, 0.3)
    expect(code == "timeout", f"asyncpg's timeout got {code}")
    expect(took < 2.5, f"the cancel took {took:.1f} s")


async def check_statement_timeout(pool):
    async def set_timeout(conn):
        await conn.execute("SET statement_timeout = 300")

    code, took = await blocked_update(pool, 311, set_timeout, None)
    expect(code == "57014", f"past statement_timeout: {code}, not 57014")
    expect(took < 2.5, f"the timeout took {took:.1f} s")


async def main():
    m = Matrix("asyncpg")
    try:
        pool = await asyncpg.create_pool(DSN, min_size=1, max_size=4, timeout=10)
    except Exception as e:
        m.record("connect", f"{type(e).__name__}: {e}")
        m.finish()
        return
    m.record("connect", None)
    async with pool:
        for name, fn in [
            ("select 1 and version()", check_connect),
            ("pool: concurrent transfers, reset on release", check_pool_concurrent),
            ("block committed", check_block_committed),
            ("block rolled back leaves nothing", check_block_rolled_back),
            ("cursor in a block", check_cursor_in_block),
            ("error in a block, then 25P02", check_error_in_block),
            ("errors and their SQLSTATEs", check_errors),
            ("parameters", check_parameters),
            ("arrays", check_arrays),
            ("SQL subset on accounts", check_sql_subset),
            ("cancel (asyncpg timeout)", check_cancel),
            ("statement_timeout", check_statement_timeout),
        ]:
            await m.run_async(name, fn, pool)
    m.finish()


if __name__ == "__main__":
    asyncio.run(main())
