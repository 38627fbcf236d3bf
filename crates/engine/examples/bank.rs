//! A bank on two islands: accounts spread over both, transfers from several
//! application threads at once, and audits that check that money is neither
//! made nor lost.
//!
//! ```sh
//! cargo run --release -p islands --example bank                  # sync log in a fresh temp dir
//! cargo run --release -p islands --example bank -- --log-dir DIR # keep the log: run it again to recover it
//! cargo run --release -p islands --example bank -- --durability off
//! ```
//!
//! A transfer is homed on the island of its source account; when the target
//! lies on the other island it commits with two-phase commit. Exit code 1
//! when an audit sees a wrong total, 2 on bad arguments or a failed open.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use islands::api::Value::Int;
use islands::api::{CallError, Catalog, Client, Deployment, Options, Partition, ProcDef, Type};
use islands::deploy::{DeploySpec, Islands};
use islands::storage::{Col, ColType, PrimaryKind, TableDef, TableId};
use islands::Abort;

const SITES: u32 = 4; // sites 0-1 on island 0, sites 2-3 on island 1
const PER_SITE: u64 = 250; // accounts of site s: s * PER_SITE ..
const ACCOUNTS: u64 = SITES as u64 * PER_SITE;
const INITIAL: i64 = 1_000;
const BALANCE: Col = Col(0);
const RUN_FOR: Duration = Duration::from_secs(2);

/// The table of accounts and the three procedures.
fn catalog() -> (Catalog, TableId) {
    let mut c = Catalog::new();
    let columns = [("balance", ColType::I64)];
    let def = TableDef::new("accounts", &columns, 4096, PrimaryKind::Hash);
    let t = c.table(def, Partition::BySite(|a| (a / PER_SITE) as u32));
    let transfer = ProcDef::new("transfer", move |tx, a, _| {
        Box::pin(async move {
            let (from, to, amount) = (a.int(0) as u64, a.int(1) as u64, a.int(2));
            if from == to || amount <= 0 {
                return Err(Abort::User("not a transfer"));
            }
            let f = tx.get_for_update(t, from).await?;
            let g = tx.get_for_update(t, to).await?;
            let (Some(f), Some(g)) = (f, g) else {
                return Err(Abort::User("no such account"));
            };
            if tx.row(f).i64(BALANCE) < amount {
                return Err(Abort::User("insufficient funds")); // rolled back, not retried
            }
            // Checked arithmetic: an overflow rolls the transfer back
            // (CallError::OutOfRange) instead of storing a wrapped balance.
            tx.row_mut(f).sub_i64(BALANCE, amount)?;
            tx.row_mut(g).add_i64(BALANCE, amount)?;
            Ok(())
        })
    })
    .param("from", Type::Int)
    .param("to", Type::Int)
    .param("amount", Type::Int)
    .home_by(0, t); // runs on the island of `from`
    let balance = ProcDef::new("balance", move |tx, a, out| {
        Box::pin(async move {
            if let Some(h) = tx.get(t, a.int(0) as u64).await? {
                out.push(vec![Int(tx.row(h).i64(BALANCE))]);
            }
            Ok(())
        })
    })
    .param("account", Type::Int)
    .column("balance", Type::Int)
    .home_by(0, t);
    let audit = ProcDef::new("audit", move |tx, _, out| {
        Box::pin(async move {
            // One request per island for all of its accounts.
            let keys: Vec<u64> = (0..ACCOUNTS).collect();
            tx.get_many(t, &keys, false).await?;
            let sum = (0..keys.len())
                .filter_map(|i| tx.many_row(i))
                .map(|h| tx.row(h).i64(BALANCE));
            out.push(vec![Int(sum.sum())]);
            Ok(())
        })
    })
    .column("total", Type::Int); // no home: any island runs it
    for p in [transfer, balance, audit] {
        c.procedure(p).expect("names are unique");
    }
    (c, t)
}

fn audit(client: &Client) -> Result<i64, CallError> {
    let rows = client.call("audit", &[])?;
    Ok(rows[0][0].as_int().unwrap_or_default())
}

/// One application thread: random transfers until `stop`; returns how many
/// committed, rolled back and gave up on conflicts.
fn transfers(client: Client, seed: u64, stop: &AtomicBool) -> [u64; 3] {
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ seed;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n) as i64
    };
    let mut counts = [0; 3];
    while !stop.load(Ordering::Relaxed) {
        let from = next(ACCOUNTS);
        let to = (from + 1 + next(ACCOUNTS - 1)) % ACCOUNTS as i64;
        match client.call("transfer", &[Int(from), Int(to), Int(1 + next(200))]) {
            Ok(_) => counts[0] += 1,
            Err(CallError::Rollback { .. }) => counts[1] += 1, // insufficient funds
            Err(CallError::Serialization { .. }) => counts[2] += 1,
            Err(e) => panic!("transfer {from} -> {to}: {e}"),
        }
    }
    counts
}

/// The auditing thread: audits until `stop`; returns how many it made and
/// how many saw a total other than `expected`.
fn audits(client: &Client, expected: i64, stop: &AtomicBool) -> (u64, u64) {
    let (mut made, mut wrong) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        match audit(client) {
            Ok(total) => (made, wrong) = (made + 1, wrong + u64::from(total != expected)),
            Err(CallError::Serialization { .. }) => {} // conflicts: try again
            Err(e) => panic!("audit: {e}"),
        }
    }
    (made, wrong)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: the total was not conserved");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let mut spec = DeploySpec::new(Islands::Count(2));
    spec.sites = Some(SITES);
    spec.durability = "sync".into();
    let mut given_dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--log-dir" => given_dir = Some(value()?.into()),
            "--durability" => spec.durability = value()?,
            _ => return Err(format!("unknown argument {arg:?} (see the example's doc)").into()),
        }
    }
    // Without --log-dir, a fresh directory, removed at the end.
    let temp = std::env::temp_dir().join(format!("islands-bank-{}", std::process::id()));
    spec.log_dir = given_dir.clone().unwrap_or(temp.clone());
    println!(
        "bank: 2 islands, {ACCOUNTS} accounts, durability {}",
        spec.durability
    );

    // Opens (or recovers) both islands; `load` runs only for a new database,
    // once per island, with the sites that island holds.
    let (catalog, table) = catalog();
    let db = Deployment::open(Options::new(spec), catalog, |load| {
        let sites = load.sites();
        for account in sites.start as u64 * PER_SITE..sites.end as u64 * PER_SITE {
            load.put(table, account, |row| row.set_i64(BALANCE, INITIAL))?;
        }
        Ok(())
    })?;
    let client = db.client();
    let expected = ACCOUNTS as i64 * INITIAL;
    let start = audit(&client)?;

    // 4 threads call transfers, one audits, for RUN_FOR.
    let stop = AtomicBool::new(false);
    let began = Instant::now();
    let (counts, (made, wrong)) = std::thread::scope(|s| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (client, stop) = (client.clone(), &stop);
                s.spawn(move || transfers(client, t, stop))
            })
            .collect();
        let auditor = s.spawn(|| audits(&client, expected, &stop));
        std::thread::sleep(RUN_FOR);
        stop.store(true, Ordering::Relaxed);
        let counts = threads.into_iter().map(|t| t.join().unwrap());
        let counts = counts.fold([0; 3], |a, b| [a[0] + b[0], a[1] + b[1], a[2] + b[2]]);
        (counts, auditor.join().unwrap())
    });
    let secs = began.elapsed().as_secs_f64();
    let end = audit(&client)?;
    let one = client.call("balance", &[Int(0)])?;
    db.shutdown()?;
    if given_dir.is_none() && temp.exists() {
        std::fs::remove_dir_all(&temp)?;
    }

    let [committed, rolled_back, gave_up] = counts;
    let calls = (committed + rolled_back + gave_up) as f64 / secs;
    println!("transfers: {committed} committed, {rolled_back} rolled back, {gave_up} gave up");
    println!("calls: {calls:.0} transfers/s from 4 threads over {secs:.1} s");
    println!("audits: {made} during the run, {wrong} with a wrong total");
    println!("total: {start} at the start, {end} at the end (expected {expected})");
    println!("account 0 holds {}", one[0][0]);
    Ok(wrong == 0 && start == expected && end == expected)
}
