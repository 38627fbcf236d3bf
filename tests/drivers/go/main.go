// pgx v5 with pgxpool against `islands serve --init bank`: see
// tests/drivers/checks.py for what each check means. pgx prepares and caches
// statements (extended protocol), sends []int64 as a binary int8[], and
// cancels a query whose context is done with a CancelRequest.
//
// Each check prints PASS or FAIL with its reason; the exit status is 1 if
// any failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	tid      = 3_000_000 // transfer ids of this driver
	opening  = 1000
	accountA = 120
	accountB = 121
	accountC = 122
)

var (
	dsn      = env("ISLANDS_DSN", "postgresql://drivers@127.0.0.1:5433/islands")
	arrayDSN = env("ISLANDS_ARRAY_DSN", "")
)

func env(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

type failure string

func expect(ok bool, format string, args ...any) {
	if !ok {
		panic(failure(fmt.Sprintf(format, args...)))
	}
}

func must(err error, what string) {
	if err != nil {
		panic(failure(fmt.Sprintf("%s: %s", what, describe(err))))
	}
}

func describe(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fmt.Sprintf("[%s] %s", pe.Code, pe.Message)
	}
	return err.Error()
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	if err == nil {
		return "none"
	}
	return "no SQLSTATE: " + err.Error()
}

type matrix struct {
	passed int
	failed []string
}

func (m *matrix) run(name string, fn func()) {
	defer func() {
		if r := recover(); r != nil {
			m.failed = append(m.failed, name)
			fmt.Printf("FAIL pgx %s: %v\n", name, r)
		}
	}()
	fn()
	m.passed++
	fmt.Printf("PASS pgx %s\n", name)
}

func balance(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, account int64) int64 {
	var b int64
	must(q.QueryRow(ctx, "SELECT * FROM bank_balance($1)", account).Scan(&b), "bank_balance")
	return b
}

// The first column of bank_total(): the sum of all balances.
func bankTotal(ctx context.Context, pool *pgxpool.Pool) int64 {
	rows, err := pool.Query(ctx, "SELECT * FROM bank_total()")
	must(err, "bank_total")
	defer rows.Close()
	expect(rows.Next(), "bank_total answered no row: %v", rows.Err())
	vals, err := rows.Values()
	must(err, "bank_total")
	total, ok := vals[0].(int64)
	expect(ok, "bank_total's first column is %T", vals[0])
	return total
}

func main() {
	ctx := context.Background()
	m := &matrix{}
	var pool *pgxpool.Pool
	m.run("connect", func() {
		cfg, err := pgxpool.ParseConfig(dsn)
		must(err, "parse dsn")
		cfg.MaxConns = 4
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
		pool, err = pgxpool.NewWithConfig(ctx, cfg)
		must(err, "pool")
		must(pool.Ping(ctx), "ping")
	})
	if pool == nil || len(m.failed) > 0 {
		finish(m)
	}
	defer pool.Close()

	m.run("select 1 and version()", func() {
		var one int
		must(pool.QueryRow(ctx, "SELECT 1").Scan(&one), "SELECT 1")
		expect(one == 1, "SELECT 1 = %d", one)
		var v string
		must(pool.QueryRow(ctx, "SELECT version()").Scan(&v), "version()")
	})

	m.run("pool: concurrent transfers", func() {
		total0 := bankTotal(ctx, pool)
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				for k := 0; k < 10; k++ {
					_, err := pool.Exec(ctx, "CALL transfer($1, $2, $3, $4)",
						tid+100+i*10+k, 240+i, 250+i, 1)
					if err != nil {
						errs <- err
					}
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(err, "a pool worker")
		}
		total := bankTotal(ctx, pool)
		// Conserved across the transfers; the opening sum is `islands check`'s
		// to check, so a check that failed before this one does not fail it too.
		expect(total == total0, "total %d then %d", total0, total)
		expect(balance(ctx, pool, 250) == opening+10, "account 250 did not get its 10 transfers")
	})

	m.run("block committed", func() {
		a0, b0 := balance(ctx, pool, accountA), balance(ctx, pool, accountB)
		tx, err := pool.Begin(ctx)
		must(err, "BEGIN")
		defer tx.Rollback(ctx)
		expect(tx.Conn().PgConn().TxStatus() == 'T', "inside a block the status is %q, not 'T'",
			tx.Conn().PgConn().TxStatus())
		_, err = tx.Exec(ctx, "CALL transfer($1, $2, $3, $4)", tid+1, accountA, accountB, 5)
		must(err, "transfer in the block")
		_, err = tx.Exec(ctx, "CALL transfer($1, $2, $3, $4)", tid+2, accountA, accountB, 6)
		must(err, "transfer in the block")
		must(tx.Commit(ctx), "COMMIT")
		a1, b1 := balance(ctx, pool, accountA), balance(ctx, pool, accountB)
		expect(a1 == a0-11 && b1 == b0+11, "after commit %d,%d -> %d,%d", a0, b0, a1, b1)
	})

	m.run("block rolled back leaves nothing", func() {
		c0 := balance(ctx, pool, accountC)
		tx, err := pool.Begin(ctx)
		must(err, "BEGIN")
		_, err = tx.Exec(ctx, "CALL transfer($1, $2, $3, $4)", tid+3, accountC, accountA, 50)
		must(err, "transfer in the block")
		_, err = tx.Exec(ctx, "UPDATE accounts SET balance = balance + 7 WHERE id = $1", accountC)
		must(err, "UPDATE in the block")
		must(tx.Rollback(ctx), "ROLLBACK")
		c1 := balance(ctx, pool, accountC)
		expect(c1 == c0, "ROLLBACK left changes: balance %d -> %d", c0, c1)
		_, err = pool.Exec(ctx, "CALL transfer($1, $2, $3, $4)", tid+3, accountC, accountA, 1)
		must(err, "the transfer id after the rollback")
	})

	m.run("error in a block, then 25P02", func() {
		tx, err := pool.Begin(ctx)
		must(err, "BEGIN")
		defer tx.Rollback(ctx)
		_, err = tx.Exec(ctx, "CALL no_such_procedure(1)")
		expect(sqlState(err) == "42883", "unknown procedure: %s, not 42883", sqlState(err))
		_, err = tx.Exec(ctx, "SELECT 1")
		expect(sqlState(err) == "25P02", "after an error in a block: %s, not 25P02", sqlState(err))
	})

	m.run("errors and their SQLSTATEs", func() {
		cases := []struct {
			sql  string
			args []any
			want string
		}{
			{"CALL no_such_procedure(1)", nil, "42883"},
			{"CALL transfer($1, $2, $3, $4)", []any{tid + 4, accountA, accountB, 1_000_000_000}, "P0001"},
			{"SELEC 1", nil, "42601"},
			{"SELECT balance FROM no_such_table WHERE id = 1", nil, "42P01"},
			{"SELECT no_such_column FROM accounts WHERE id = 1", nil, "42703"},
			{"SAVEPOINT s1", nil, "0A000"},
		}
		for _, c := range cases {
			_, err := pool.Exec(ctx, c.sql, c.args...)
			expect(sqlState(err) == c.want, "%q: %s, not %s", c.sql, sqlState(err), c.want)
		}
	})

	m.run("parameters (extended and simple protocol)", func() {
		var b int64
		must(pool.QueryRow(ctx, "SELECT * FROM bank_balance($1)", accountA).Scan(&b), "extended")
		// pgx's simple protocol (as behind PgBouncer): arguments as quoted literals.
		must(pool.QueryRow(ctx, "SELECT * FROM bank_balance($1)", pgx.QueryExecModeSimpleProtocol,
			accountA).Scan(&b), "simple protocol")
		must(pool.QueryRow(ctx, "SELECT * FROM bank_balance($1::int8) AS result", accountA).Scan(&b),
			"a cast and an alias")
	})

	m.run("arrays", func() {
		expect(arrayDSN != "", "ISLANDS_ARRAY_DSN is not set (scripts/drivers.sh sets it)")
		conn, err := pgx.Connect(ctx, arrayDSN)
		must(err, "connect to the ycsb server")
		defer conn.Close(ctx)
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
			rows, err := conn.Query(ctx, "SELECT * FROM ycsb_multi_read($1)", mode, []int64{1, 2, 3})
			must(err, "ycsb_multi_read")
			var keys []int64
			for rows.Next() {
				vals, err := rows.Values()
				must(err, "row")
				keys = append(keys, vals[0].(int64))
			}
			must(rows.Err(), "rows")
			sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
			expect(fmt.Sprint(keys) == "[1 2 3]", "mode %v: keys %v", mode, keys)
		}
	})

	m.run("SQL subset on accounts", func() {
		var a0, a1 int64
		must(pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", accountA).Scan(&a0), "point SELECT")
		tag, err := pool.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", 7, accountA)
		must(err, "UPDATE")
		expect(tag.String() == "UPDATE 1", "UPDATE answered %q", tag.String())
		must(pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", accountA).Scan(&a1), "point SELECT")
		expect(a1 == a0+7, "after UPDATE +7: %d -> %d", a0, a1)
		_, err = pool.Exec(ctx, "UPDATE accounts SET balance = balance - 7 WHERE id = $1", accountA)
		must(err, "UPDATE back")
		x := int64(992)
		var bx int64
		must(pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", x).Scan(&bx), "point SELECT")
		tag, err = pool.Exec(ctx, "DELETE FROM accounts WHERE id = $1", x)
		must(err, "DELETE")
		expect(tag.String() == "DELETE 1", "DELETE answered %q", tag.String())
		err = pool.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", x).Scan(&bx)
		expect(errors.Is(err, pgx.ErrNoRows), "a deleted row: %v", err)
		tag, err = pool.Exec(ctx, "INSERT INTO accounts (id, balance) VALUES ($1, $2)", x, bx)
		must(err, "INSERT")
		expect(tag.String() == "INSERT 0 1", "INSERT answered %q", tag.String())
		_, err = pool.Exec(ctx, "INSERT INTO accounts (id, balance) VALUES ($1, 0)", x)
		expect(sqlState(err) == "23505", "a duplicate key: %s, not 23505", sqlState(err))
	})

	// An UPDATE of a row another open block holds: it waits, so it can be
	// cancelled or time out.
	blocked := func(account int64, prepare string, timeout time.Duration) (string, time.Duration) {
		holder, err := pgx.Connect(ctx, dsn)
		must(err, "connect the holder")
		defer holder.Close(ctx)
		htx, err := holder.Begin(ctx)
		must(err, "holder BEGIN")
		defer htx.Rollback(ctx)
		_, err = htx.Exec(ctx, "UPDATE accounts SET balance = balance + 0 WHERE id = $1", account)
		must(err, "holder UPDATE")
		conn, err := pool.Acquire(ctx)
		must(err, "acquire")
		defer conn.Release()
		if prepare != "" {
			_, err = conn.Exec(ctx, prepare)
			must(err, prepare)
			defer conn.Exec(ctx, "RESET ALL")
		}
		qctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			qctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		t0 := time.Now()
		_, err = conn.Exec(qctx, "UPDATE accounts SET balance = balance + 0 WHERE id = $1", account)
		return sqlState(err), time.Since(t0)
	}

	m.run("cancel (context)", func() {
		code, took := blocked(320, "", 300*time.Millisecond)
		expect(code == "57014" || strings.Contains(code, "context deadline exceeded"),
			"a cancelled query: %s", code)
		expect(took < 2500*time.Millisecond, "the cancel took %v", took)
	})

	m.run("statement_timeout", func() {
		code, took := blocked(321, "SET statement_timeout = 300", 0)
		expect(code == "57014", "past statement_timeout: %s, not 57014", code)
		expect(took < 2500*time.Millisecond, "the timeout took %v", took)
	})

	finish(m)
}

func finish(m *matrix) {
	fmt.Printf("pgx: %d passed, %d failed\n", m.passed, len(m.failed))
	if len(m.failed) > 0 {
		fmt.Printf("pgx: failed: %s\n", strings.Join(m.failed, ", "))
		os.Exit(1)
	}
	os.Exit(0)
}
