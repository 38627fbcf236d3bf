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

pub(super) const ACCOUNTS: TableId = 0;
pub(super) const N: u64 = SITES * PER_SITE;

pub(super) fn bank() -> Catalog {
    let mut c = Catalog::new();
    assert_eq!(site_accounts(&mut c, 1 << 12), ACCOUNTS);
    c.procedure(transfer_proc(ACCOUNTS)).unwrap();
    c.procedure(balance_proc(ACCOUNTS)).unwrap();
    c
}

/// The island holding account `k` (two islands over the four sites).
pub(super) fn island_of(k: u64) -> usize {
    (k / PER_SITE / (SITES / 2)) as usize
}

pub(super) fn options(dir: &Path, kind: Kind, island: u16, expect: Expect, id: u128) -> Options {
    let mut o = site_options(2, "sync", Some(&dir.join("logs")));
    o.spec.processes = Some(Processes {
        id,
        transport: kind,
        secret: islands::deploy::SecretSource::File(dir.join("secret")),
        endpoints: Vec::new(),
        run_dir: dir.join("run"),
    });
    o.island = Some(island);
    o.expect = expect;
    o.txns_per_worker = 4;
    o.commits_per_worker = 8;
    // A forwarded call that a block's locks hold back retries until it is
    // canceled, not until its attempts run out.
    o.max_attempts = 10_000;
    o
}

/// Writes the deployment's secret where [`options`] names it,
/// `dir/secret`, readable by its owner only (the handshake refuses others).
pub(super) fn write_secret(dir: &Path) {
    let secret = dir.join("secret");
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&secret, b"a secret of more than sixteen bytes").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Opens both islands at once (each waits for nothing: its peer is dialed
/// in the background), and waits until they are connected.
fn open_both(dir: &Path, kind: Kind, expect: Expect, id: u128) -> (Deployment, Deployment) {
    open_both_opts(|k| options(dir, kind, k, expect, id))
}

/// [`open_both`], each island's options changed by `tweak` first.
pub(super) fn open_both_with(
    dir: &Path,
    kind: Kind,
    expect: Expect,
    id: u128,
    tweak: impl Fn(u16, &mut Options),
) -> (Deployment, Deployment) {
    open_both_opts(|k| {
        let mut o = options(dir, kind, k, expect, id);
        tweak(k, &mut o);
        o
    })
}

/// [`open_both`], island `k` opened with `options(k)`.
fn open_both_opts(options: impl Fn(u16) -> Options) -> (Deployment, Deployment) {
    let open = |k: u16| {
        let o = options(k);
        std::thread::spawn(move || Deployment::open(o, bank(), |l| load_site_accounts(l, ACCOUNTS)))
    };
    let (a, b) = (open(0), open(1));
    let (a, b) = (a.join().unwrap().unwrap(), b.join().unwrap().unwrap());
    wait_connected(&[&a, &b]);
    (a, b)
}

fn wait_connected(ds: &[&Deployment]) {
    let end = Instant::now() + Duration::from_secs(20);
    while ds
        .iter()
        .any(|d| d.peers().iter().any(|p| p.state != PeerState::Up))
    {
        assert!(Instant::now() < end, "not connected: {:?}", ds[0].peers());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The sum of every balance, read through one client (the calls homed on
/// the other process's island are forwarded there).
pub(super) fn total(client: &Client) -> i64 {
    (0..N)
        .map(|k| {
            client.call("balance", &[Value::Int(k as i64)]).unwrap()[0][0]
                .as_int()
                .unwrap()
        })
        .sum()
}

pub(super) fn balance(client: &Client, k: u64) -> i64 {
    client.call("balance", &[Value::Int(k as i64)]).unwrap()[0][0]
        .as_int()
        .unwrap()
}

/// A xorshift generator from `seed` (not 0).
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

/// A random transfer of 0 to 19 between two accounts drawn by `next`:
/// (from, to, the call's arguments), or `None` when they are the same.
fn random_transfer(next: &mut impl FnMut() -> u64) -> Option<(u64, u64, [Value; 3])> {
    let (from, to) = (next() % N, next() % N);
    let amount = (next() % 20) as i64;
    (from != to).then(|| {
        let args = [
            Value::Int(from as i64),
            Value::Int(to as i64),
            Value::Int(amount),
        ];
        (from, to, args)
    })
}

/// Random transfers from `threads` threads, thread `t` calling through
/// `clients[t % 2]` only, whatever the transfer's home: (committed, of
/// them forwarded to the other process, of them crossing islands).
fn transfers(clients: &[Client; 2], threads: u64, each: usize) -> (usize, usize, usize) {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let client = clients[(t % 2) as usize].clone();
            let mine = (t % 2) as usize;
            std::thread::spawn(move || {
                let mut next = xorshift(
                    0x9e37_79b9_7f4a_7c15u64 ^ (t + 1).wrapping_mul(0x2545_f491_4f6c_dd1d),
                );
                let (mut committed, mut forwarded, mut crossing) = (0, 0, 0);
                for _ in 0..each {
                    let Some((from, to, args)) = random_transfer(&mut next) else {
                        continue;
                    };
                    match client.call("transfer", &args) {
                        Ok(_) => {
                            committed += 1;
                            forwarded += usize::from(island_of(from) != mine);
                            crossing += usize::from(island_of(from) != island_of(to));
                        }
                        Err(CallError::Serialization { .. } | CallError::Rollback { .. }) => {}
                        Err(e) => panic!("transfer {from} -> {to} through island {mine}: {e}"),
                    }
                }
                (committed, forwarded, crossing)
            })
        })
        .collect();
    handles.into_iter().fold((0, 0, 0), |acc, h| {
        let (c, f, x) = h.join().unwrap();
        (acc.0 + c, acc.1 + f, acc.2 + x)
    })
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
    write_secret(&dir);
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
    // Every balance, through either process: half of the calls are
    // forwarded to the other.
    assert_eq!(total(&clients[0]), N as i64 * INITIAL);
    assert_eq!(total(&clients[1]), N as i64 * INITIAL);
    // A forwarded call's error is the one its home gives.
    match clients[0].call(
        "transfer",
        &[
            Value::Int((N - 1) as i64),
            Value::Int(0),
            Value::Int(INITIAL + 1),
        ],
    ) {
        Err(CallError::Rollback { procedure, why }) => {
            assert_eq!(
                (procedure.as_str(), why.as_str()),
                ("transfer", "insufficient funds")
            )
        }
        r => panic!("an overdraft homed on island 1, called on island 0: {r:?}"),
    }
    let (committed, forwarded, crossing) = transfers(&clients, 4, 150);
    assert!(
        committed > 400 && forwarded > 150 && crossing > 150,
        "{committed} committed, {forwarded} forwarded, {crossing} crossing"
    );
    assert_eq!(total(&clients[0]), N as i64 * INITIAL);
    let crossed: u64 = [&a, &b]
        .iter()
        .map(|d| d.peers().iter().map(|p| p.batches_out).sum::<u64>())
        .sum();
    assert!(crossed > 0, "no batch crossed between the islands");

    // A canceled forwarded call: rolled back at its home, nothing moved.
    // A block on island 1 holds both accounts' locks, so the transfer
    // forwarded there retries (no_wait) until the cancel reaches it.
    let (from, to) = (N - 1, N - 2);
    assert_eq!((island_of(from), island_of(to)), (1, 1));
    let before = (balance(&clients[0], from), balance(&clients[0], to));
    let mut blk = clients[1].begin();
    block_on(blk.call(
        "transfer",
        vec![
            Value::Int(from as i64),
            Value::Int(to as i64),
            Value::Int(0),
        ],
        None,
    ))
    .unwrap();
    let cancel = islands::api::CancelFlag::new();
    let mut f = clients[0].call_async_cancelable(
        "transfer",
        vec![
            Value::Int(from as i64),
            Value::Int(to as i64),
            Value::Int(1),
        ],
        &cancel,
    );
    let end = Instant::now() + Duration::from_millis(30);
    while Instant::now() < end {
        assert!(
            poll_once(&mut f).is_none(),
            "the transfer ran past the block's locks"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    cancel.cancel();
    match block_on(f) {
        Err(CallError::Canceled { procedure }) => assert_eq!(procedure, "transfer"),
        r => panic!("a canceled forwarded call answered {r:?}"),
    }
    block_on(blk.rollback()).unwrap();
    assert_eq!(
        (balance(&clients[0], from), balance(&clients[0], to)),
        before
    );
    // Canceled before it left: it never runs.
    let f = clients[0].call_async_cancelable(
        "transfer",
        vec![
            Value::Int(from as i64),
            Value::Int(to as i64),
            Value::Int(1),
        ],
        &cancel,
    );
    assert!(matches!(block_on(f), Err(CallError::Canceled { .. })));
    assert_eq!(
        (balance(&clients[0], from), balance(&clients[0], to)),
        before
    );
    drop(clients);
    a.shutdown().unwrap();
    b.shutdown().unwrap();

    // Both recover what they committed.
    let (a, b) = open_both(&dir, kind, Expect::Recover, id);
    let clients = [a.client(), b.client()];
    assert_eq!(total(&clients[1]), N as i64 * INITIAL);

    // Island 1 goes away while island 0's process forwards it calls: they
    // fail with IslandDown, each within a second (with slack for a loaded
    // machine), and so do new ones, at once.
    let reader = {
        let client = clients[0].clone();
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            for i in 0.. {
                let t = Instant::now();
                let r = client.call("balance", &[Value::Int((N - 1 - i % PER_SITE) as i64)]);
                slowest = slowest.max(t.elapsed());
                match r {
                    Ok(_) => {}
                    Err(CallError::IslandDown { island: 1, .. }) => return (i, slowest),
                    Err(e) => panic!("a forwarded call as island 1 went down: {e}"),
                }
            }
            unreachable!()
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    drop(clients);
    b.shutdown().unwrap();
    let (calls, slowest) = reader.join().unwrap();
    assert!(calls > 0, "no forwarded call before island 1 went down");
    assert!(
        slowest < Duration::from_millis(1500),
        "a forwarded call took {slowest:?} as its island went down"
    );
    let client = a.client();
    let t = Instant::now();
    match client.call("balance", &[Value::Int((N - 1) as i64)]) {
        Err(CallError::IslandDown { island: 1, .. }) => {}
        r => panic!("a call homed on a down island answered {r:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    drop(client);
    a.shutdown().unwrap();

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

#[test]
fn a_clean_stop_under_load_drains_and_says_goodbye() {
    clean_stop_under_load(Kind::Uds);
}

#[test]
fn a_clean_stop_over_shm_under_load_drains_and_says_goodbye() {
    clean_stop_under_load(Kind::Shm);
}

/// What the callers of island 0 heard while island 1 stopped.
#[derive(Default, Debug)]
struct Heard {
    committed: usize,
    /// Committed transfers between the two islands.
    crossing: usize,
    /// Rolled back by the procedure (insufficient funds).
    rolled_back: usize,
    island_down: usize,
    closing: usize,
    slowest: Duration,
}

/// Random transfers across the whole bank through `client` (island 0's),
/// from `threads` threads, until `stop`. Every call either commits, rolls
/// back on its own, or fails because island 1 is down or closing: any
/// other answer fails the test.
fn load_until(
    client: &Client,
    threads: u64,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<Heard>> {
    (0..threads)
        .map(|t| {
            let (client, stop) = (client.clone(), std::sync::Arc::clone(stop));
            std::thread::spawn(move || {
                let mut next = xorshift(
                    0x2545_f491_4f6c_dd1du64 ^ (t + 7).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                );
                let mut h = Heard::default();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let Some((from, to, args)) = random_transfer(&mut next) else {
                        continue;
                    };
                    let t = Instant::now();
                    let r = client.call("transfer", &args);
                    h.slowest = h.slowest.max(t.elapsed());
                    match r {
                        Ok(_) => {
                            h.committed += 1;
                            h.crossing += usize::from(island_of(from) != island_of(to));
                        }
                        Err(CallError::Rollback { .. }) => h.rolled_back += 1,
                        Err(CallError::IslandDown { island: 1, .. }) => h.island_down += 1,
                        Err(CallError::ShutDown) => h.closing += 1,
                        Err(e) => panic!("transfer {from} -> {to} as island 1 stopped: {e}"),
                    }
                }
                h
            })
        })
        .collect()
}

/// Island 1 stops cleanly while island 0's callers run transfers across
/// both (a heartbeat timeout of 30 s, so that only the goodbye explains a
/// prompt "down"): no call hangs or fails otherwise than with IslandDown or
/// the closing error; island 0 counts island 1 down at once, from its
/// goodbye; and island 1's log holds no branch in doubt: reopened, it
/// recovers none, and the money is all there.
fn clean_stop_under_load(kind: Kind) {
    let dir = temp_dir(&format!("clean-stop-{kind}"));
    write_secret(&dir);
    let id = islands::wal::new_deployment_id();
    let opts = |k: u16, expect: Expect| {
        let mut o = options(&dir, kind, k, expect, id);
        o.peer_dead_after = Some(Duration::from_secs(30));
        o
    };
    let (a, b) = open_both_opts(|k| opts(k, Expect::Either));
    let client = a.client();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = load_until(&client, 4, &stop);
    // Until transfers between the islands commit (on a loaded machine,
    // however long that takes).
    let end = Instant::now() + Duration::from_secs(60);
    while a.peers()[0].batches_out < 200 {
        assert!(Instant::now() < end, "no traffic: {:?}", a.peers());
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));

    let t = Instant::now();
    b.shutdown().unwrap();
    let stopping = t.elapsed();
    let end = Instant::now() + Duration::from_secs(5);
    while a.islands_state()[1].up {
        assert!(
            Instant::now() < end,
            "island 0 still counts island 1 up {:?} after it stopped: {:?}",
            t.elapsed(),
            a.peers()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let p = a.peers()[0].clone();
    assert_eq!(p.goodbyes, 1, "island 1 left without a goodbye: {p:?}");
    // Calls that need island 1 now fail at once; the others go on.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let heard = load
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold(Heard::default(), |s, h| Heard {
            committed: s.committed + h.committed,
            crossing: s.crossing + h.crossing,
            rolled_back: s.rolled_back + h.rolled_back,
            island_down: s.island_down + h.island_down,
            closing: s.closing + h.closing,
            slowest: s.slowest.max(h.slowest),
        });
    eprintln!("{kind}: island 1 stopped in {stopping:?}; island 0's callers heard {heard:?}");
    assert!(
        heard.crossing > 0 && heard.island_down > 0,
        "{heard:?}: transfers across before, IslandDown after"
    );
    // The stop's drain is bounded (2 s), and so is every call's wait.
    assert!(
        heard.slowest < Duration::from_secs(10),
        "a call waited {:?}",
        heard.slowest
    );
    drop(client);

    // Island 1 left nothing in doubt, and every transfer is whole.
    let b = Deployment::open(opts(1, Expect::Recover), bank(), |_| Ok(())).unwrap();
    let in_doubt: usize = b.recovered().iter().map(|r| r.in_doubt.len()).sum();
    assert_eq!(in_doubt, 0, "island 1 left branches in doubt");
    wait_connected(&[&a, &b]);
    assert_eq!(total(&a.client()), N as i64 * INITIAL);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Island 1 goes down while island 0's callers run transfers across both:
/// from one moment every batch island 1 sends is lost (island 0 waits for
/// acknowledgements of commits it decided, and for decisions on branches it
/// prepared, that never come), then island 1 stops after its own short
/// drain and says goodbye. Island 0's clean stop then leaves at once,
/// well within its 10-s drain timeout: what only island 1 could answer
/// stays in island 0's log (commit decisions unended, branches in doubt),
/// and the two islands, reopened, resolve it: the money is all there and
/// nothing stays in doubt.
#[test]
fn a_clean_stop_beside_a_down_island_does_not_wait_for_it() {
    use islands::executor::fault::Lossy;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let dir = temp_dir("stop-beside-down");
    write_secret(&dir);
    let id = islands::wal::new_deployment_id();
    let drain_timeout = Duration::from_secs(10);
    let cut = Arc::new(AtomicBool::new(false));
    let lossy: Arc<std::sync::OnceLock<Arc<Lossy>>> = Arc::default();
    let (c, l) = (Arc::clone(&cut), Arc::clone(&lossy));
    let (a, b) = open_both_with(&dir, Kind::Uds, Expect::Either, id, move |k, o| {
        // Only the goodbye, never a heartbeat timeout, counts island 1 down.
        o.peer_dead_after = Some(Duration::from_secs(30));
        o.drain_timeout = if k == 0 {
            drain_timeout
        } else {
            Duration::from_millis(300)
        };
        if k == 1 {
            let (c, l) = (Arc::clone(&c), Arc::clone(&l));
            o.wrap_transport = Some(Arc::new(
                move |inner: Arc<dyn islands::transport::Transport>| -> Arc<dyn islands::transport::Transport> {
                    let c = Arc::clone(&c);
                    let t = Arc::new(Lossy::new(inner, move |_, _| c.load(Ordering::SeqCst)));
                    let _ = l.set(Arc::clone(&t));
                    t
                },
            ));
        }
    });
    let client = a.client();
    let stop = Arc::new(AtomicBool::new(false));
    let load = load_until(&client, 4, &stop);
    let end = Instant::now() + Duration::from_secs(60);
    while a.peers()[0].batches_out < 200 {
        assert!(Instant::now() < end, "no traffic: {:?}", a.peers());
        std::thread::sleep(Duration::from_millis(10));
    }
    cut.store(true, Ordering::SeqCst);
    let lossy = lossy.get().expect("island 1's transport is wrapped");
    let end = Instant::now() + Duration::from_secs(10);
    while lossy.lost() < 20 {
        assert!(Instant::now() < end, "island 1 sent nothing to lose");
        std::thread::sleep(Duration::from_millis(5));
    }
    b.shutdown().unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while a.islands_state()[1].up {
        assert!(Instant::now() < end, "island 0 still counts island 1 up");
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::SeqCst);
    let heard: Vec<Heard> = load.into_iter().map(|h| h.join().unwrap()).collect();
    assert!(
        heard.iter().any(|h| h.crossing > 0),
        "no transfer crossed: {heard:?}"
    );
    drop(client);

    let t = Instant::now();
    a.shutdown().unwrap();
    let stopping = t.elapsed();
    eprintln!("island 0 stopped in {stopping:?} beside a down island 1");
    assert!(
        stopping < drain_timeout / 4,
        "island 0's stop took {stopping:?}: it waited for island 1"
    );

    // Island 0 left something only island 1 could answer, and reopened
    // together they resolve it.
    let (a, b) = open_both(&dir, Kind::Uds, Expect::Recover, id);
    let r = &a.recovered()[0];
    let in_doubt = r.in_doubt.len();
    let ended: std::collections::HashSet<_> = r
        .two_pc
        .iter()
        .filter_map(|x| match x {
            islands::coord::LogRec::End { gtid } => Some(*gtid),
            _ => None,
        })
        .collect();
    let unended = r
        .two_pc
        .iter()
        .filter(|x| {
            matches!(x, islands::coord::LogRec::Decision { gtid, commit: true }
                if !ended.contains(gtid))
        })
        .count();
    eprintln!("island 0 recovered {in_doubt} branches in doubt, {unended} commits unended");
    assert!(
        in_doubt + unended > 0,
        "island 0 held nothing that waited for island 1 when it stopped"
    );
    assert_eq!(total(&a.client()), N as i64 * INITIAL);
    assert_eq!(total(&b.client()), N as i64 * INITIAL);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run directory that cannot be made (here, below a file) is refused by
/// the open, naming it.
#[test]
fn a_run_dir_that_cannot_be_made_is_refused_naming_it() {
    let dir = temp_dir("run-dir-refused");
    write_secret(&dir);
    std::fs::write(dir.join("file"), b"").unwrap();
    let run = dir.join("file").join("run");
    let mut o = options(
        &dir,
        Kind::Uds,
        0,
        Expect::Either,
        islands::wal::new_deployment_id(),
    );
    o.spec.processes.as_mut().unwrap().run_dir = run.clone();
    let Err(e) = Deployment::open(o, bank(), |l| load_site_accounts(l, ACCOUNTS)) else {
        panic!("opened with a run directory below a file");
    };
    assert!(
        e.to_string()
            .contains(&format!("cannot create {}", run.display())),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Islands that read the secret from an environment variable
/// (`secret_env`) connect and serve each other's calls; an island whose
/// variable is not set is refused at its open, naming the variable.
#[test]
fn islands_with_the_secret_in_an_environment_variable_connect() {
    const VAR: &str = "ISLANDS_IT_PROCESSES_SECRET";
    let dir = temp_dir("secret-env");
    let id = islands::wal::new_deployment_id();
    let env_options = |k: u16| {
        let mut o = options(&dir, Kind::Uds, k, Expect::Either, id);
        o.spec.processes.as_mut().unwrap().secret =
            islands::deploy::SecretSource::Env(VAR.to_string());
        o
    };
    match Deployment::open(env_options(0), bank(), |l| load_site_accounts(l, ACCOUNTS)) {
        Err(e) => assert!(e.to_string().contains(VAR), "{e}"),
        Ok(_) => panic!("opened without the secret's variable set"),
    }
    std::env::set_var(
        VAR,
        "a secret of more than sixteen bytes, from the environment",
    );
    let (a, b) = open_both_opts(env_options);
    let client = a.client();
    // An account of the other process's island: the call is forwarded.
    let far = (0..N).find(|&k| island_of(k) == 1).unwrap();
    assert_eq!(balance(&client, far), INITIAL);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls a future once: its output, if it is ready.
fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::Pin::new(f).poll(&mut cx) {
        std::task::Poll::Ready(r) => Some(r),
        std::task::Poll::Pending => None,
    }
}

/// Polls a future to its end on this thread (the test needs no runtime).
pub(super) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    loop {
        if let std::task::Poll::Ready(r) = f.as_mut().poll(&mut cx) {
            return r;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Figures, not a check: the mean latency of a `balance` call homed here
/// and of one forwarded to the other process, one caller thread each way.
/// `cargo test --release -p islands --test it processes::forwarded_call_latency -- --ignored --nocapture`
#[test]
#[ignore]
fn forwarded_call_latency() {
    let dir = temp_dir("processes-latency");
    write_secret(&dir);
    let (a, b) = open_both(
        &dir,
        Kind::Uds,
        Expect::Either,
        islands::wal::new_deployment_id(),
    );
    let client = a.client();
    for (what, k) in [
        ("local", 0),
        ("forwarded", N - 1),
        ("local", 1),
        ("forwarded", N - 2),
    ] {
        let calls = 5000;
        let t = Instant::now();
        for _ in 0..calls {
            balance(&client, k);
        }
        eprintln!(
            "{what}: {:.1} µs per call ({calls} calls)",
            t.elapsed().as_secs_f64() * 1e6 / calls as f64
        );
    }
    drop(client);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
