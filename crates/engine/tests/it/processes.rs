//! A deployment run as one [`Deployment`] per island (`Options::island`),
//! the islands joined by the transport the deployment file names (Unix
//! sockets, or shared-memory rings set up over them), as separate processes
//! run it: here two in one test process, each opened through the library's
//! one opening path.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use islands::api::open::Expect;
use islands::api::{CallError, Catalog, Client, Deployment, Options, Value};
use islands::deploy::Processes;
use islands::storage::TableId;
use islands::transport::join::Kind;
use islands::transport::peer::PeerState;

use crate::common::{
    balance_proc, load_site_accounts, site_accounts, site_options, temp_dir, transfer_proc,
    INITIAL, PER_SITE, SITES,
};

const ACCOUNTS: TableId = 0;
const N: u64 = SITES * PER_SITE;

fn bank() -> Catalog {
    let mut c = Catalog::new();
    assert_eq!(site_accounts(&mut c, 1 << 12), ACCOUNTS);
    c.procedure(transfer_proc(ACCOUNTS)).unwrap();
    c.procedure(balance_proc(ACCOUNTS)).unwrap();
    c
}

/// The island holding account `k` (two islands over the four sites).
fn island_of(k: u64) -> usize {
    (k / PER_SITE / (SITES / 2)) as usize
}

fn options(dir: &Path, kind: Kind, island: u16, expect: Expect, id: u128) -> Options {
    let mut o = site_options(2, "sync", Some(&dir.join("logs")));
    o.spec.processes = Some(Processes {
        id,
        transport: kind,
        secret_file: dir.join("secret"),
        endpoints: Vec::new(),
        run_dir: dir.join("run"),
    });
    o.island = Some(island);
    o.expect = expect;
    o.txns_per_worker = 4;
    o.commits_per_worker = 8;
    o
}

/// Opens both islands at once (each waits for nothing: its peer is dialed
/// in the background), and waits until they are connected.
fn open_both(dir: &Path, kind: Kind, expect: Expect, id: u128) -> (Deployment, Deployment) {
    let open = |k: u16| {
        let o = options(dir, kind, k, expect, id);
        std::thread::spawn(move || Deployment::open(o, bank(), |l| load_site_accounts(l, ACCOUNTS)))
    };
    let (a, b) = (open(0), open(1));
    let (a, b) = (a.join().unwrap().unwrap(), b.join().unwrap().unwrap());
    let end = Instant::now() + Duration::from_secs(20);
    while [&a, &b]
        .iter()
        .any(|d| d.peers().iter().any(|p| p.state != PeerState::Up))
    {
        assert!(Instant::now() < end, "not connected: {:?}", a.peers());
        std::thread::sleep(Duration::from_millis(5));
    }
    (a, b)
}

fn total(clients: &[Client; 2]) -> i64 {
    (0..N)
        .map(|k| {
            clients[island_of(k)]
                .call("balance", &[Value::Int(k as i64)])
                .unwrap()[0][0]
                .as_int()
                .unwrap()
        })
        .sum()
}

#[test]
fn two_island_processes_commit_transfers_across_each_other_and_recover() {
    two_island_processes(Kind::Uds);
}

#[test]
fn two_island_processes_over_shm_commit_transfers_across_each_other_and_recover() {
    two_island_processes(Kind::Shm);
}

fn two_island_processes(kind: Kind) {
    let dir = temp_dir(&format!("processes-{kind}"));
    let secret = dir.join("secret");
    std::fs::write(&secret, b"a secret of more than sixteen bytes").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let id = islands::wal::new_deployment_id();

    // A lone island that expects a loaded database finds none.
    let e = Deployment::open(options(&dir, kind, 0, Expect::Recover, id), bank(), |_| {
        Ok(())
    })
    .err()
    .unwrap();
    assert!(e.to_string().contains("no database to recover"), "{e}");

    let (a, b) = open_both(&dir, kind, Expect::Either, id);
    let clients = [a.client(), b.client()];
    assert_eq!(total(&clients), N as i64 * INITIAL);
    // A call homed on the other process's island is refused, not run here.
    match clients[0].call("balance", &[Value::Int((N - 1) as i64)]) {
        Err(CallError::Elsewhere { island: 1 }) => {}
        r => panic!("a call homed on island 1 ran on island 0's process: {r:?}"),
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut committed, mut crossing) = (0, 0);
    for _ in 0..400 {
        let (from, to) = (next() % N, next() % N);
        if from == to {
            continue;
        }
        let args = [
            Value::Int(from as i64),
            Value::Int(to as i64),
            Value::Int((next() % 20) as i64),
        ];
        match clients[island_of(from)].call("transfer", &args) {
            Ok(_) => {
                committed += 1;
                crossing += usize::from(island_of(from) != island_of(to));
            }
            Err(CallError::Serialization { .. } | CallError::Rollback { .. }) => {}
            Err(e) => panic!("transfer {from} -> {to}: {e}"),
        }
    }
    assert!(
        committed > 300 && crossing > 100,
        "{committed} committed, {crossing} crossing"
    );
    assert_eq!(total(&clients), N as i64 * INITIAL);
    let crossed: u64 = [&a, &b]
        .iter()
        .map(|d| d.peers().iter().map(|p| p.batches_out).sum::<u64>())
        .sum();
    assert!(crossed > 0, "no batch crossed between the islands");
    drop(clients);
    a.shutdown().unwrap();
    b.shutdown().unwrap();

    // Both recover what they committed.
    let (a, b) = open_both(&dir, kind, Expect::Recover, id);
    let clients = [a.client(), b.client()];
    assert_eq!(total(&clients), N as i64 * INITIAL);
    drop(clients);
    a.shutdown().unwrap();
    b.shutdown().unwrap();

    // Another deployment id is refused by the islands' directories.
    let e = Deployment::open(
        options(&dir, kind, 0, Expect::Recover, id ^ 1),
        bank(),
        |_| Ok(()),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("holds deployment"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
