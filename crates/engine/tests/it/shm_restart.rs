//! Islands as processes over shared memory, one of them starting or
//! restarting while the other's clients call it: a call forwarded to a peer
//! whose rings are not linked yet waits for the link, and is answered; no
//! forwarded call outlives its deadline. Two one-island [`Deployment`]s in
//! one test process, as `processes.rs` runs them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use islands::api::open::Expect;
use islands::api::{CallError, Client, Deployment, Options, Value};
use islands::transport::join::Kind;

use crate::common::{load_site_accounts, temp_dir, INITIAL, PER_SITE};
use crate::processes::{bank, island_of, options, ACCOUNTS, N};

/// How long a forwarded call may wait for its answer here.
const DEADLINE: Duration = Duration::from_secs(8);

fn opts(dir: &Path, k: u16, expect: Expect, id: u128) -> Options {
    let mut o = options(dir, Kind::Shm, k, expect, id);
    o.forward_timeout = DEADLINE;
    // The peer that is not there yet is starting, not dead.
    o.peer_dead_after = Some(Duration::from_secs(30));
    o
}

fn open(dir: &Path, k: u16, expect: Expect, id: u128) -> Deployment {
    Deployment::open(opts(dir, k, expect, id), bank(), |l| {
        load_site_accounts(l, ACCOUNTS)
    })
    .unwrap()
}

/// A balance homed on island `home`, called from a thread through
/// `client`: its answer and how long it took.
fn balance_call(
    client: &Client,
    home: usize,
    i: u64,
) -> std::thread::JoinHandle<(Result<i64, CallError>, Duration)> {
    let client = client.clone();
    let k = (0..N)
        .filter(|&k| island_of(k) == home)
        .nth((i % PER_SITE) as usize);
    let k = k.unwrap();
    std::thread::spawn(move || {
        let t = Instant::now();
        let r = client
            .call("balance", &[Value::Int(k as i64)])
            .map(|rows| rows[0][0].as_int().unwrap());
        (r, t.elapsed())
    })
}

#[test]
fn calls_forwarded_to_an_island_not_linked_yet_are_answered_once_it_links() {
    let dir = temp_dir("shm-restart");
    let secret = dir.join("secret");
    std::fs::write(&secret, b"a secret of more than sixteen bytes").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let id = islands::wal::new_deployment_id();

    // Island 0 alone: a call homed on island 1 leaves before island 1
    // exists, and is answered once it has started and linked.
    let a = open(&dir, 0, Expect::Either, id);
    let early = balance_call(&a.client(), 1, 0);
    std::thread::sleep(Duration::from_millis(100));
    let mut b = open(&dir, 1, Expect::Either, id);
    let (r, took) = early.join().unwrap();
    assert_eq!(r.unwrap(), INITIAL, "a call sent before its island started");
    assert!(took < DEADLINE, "{took:?}");

    // Island 1 restarts, again and again. Right after it opens, a call of
    // its own homed on island 0 leaves before the rings are linked, and is
    // answered. Calls from island 0 homed on island 1 end in time, answered
    // or failed with IslandDown, never left unanswered.
    for round in 1..=3u64 {
        let from_a: Vec<_> = (0..4)
            .map(|i| balance_call(&a.client(), 1, round * 10 + i))
            .collect();
        drop(b);
        b = open(&dir, 1, Expect::Recover, id);
        let (r, took) = balance_call(&b.client(), 0, round).join().unwrap();
        assert_eq!(
            r.unwrap(),
            INITIAL,
            "round {round}: a call from the restarted island"
        );
        assert!(took < DEADLINE, "round {round}: {took:?}");
        for h in from_a {
            let (r, took) = h.join().unwrap();
            match r {
                Ok(v) => assert_eq!(v, INITIAL),
                Err(CallError::IslandDown { island: 1, .. }) => {}
                Err(e) => panic!("round {round}: a call to the restarting island: {e}"),
            }
            assert!(took < DEADLINE, "round {round}: {took:?}");
        }
    }
    drop(b);
    drop(a);
    let _ = std::fs::remove_dir_all(&dir);
}
