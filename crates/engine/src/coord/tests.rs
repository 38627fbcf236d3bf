//! Tests: the codec, the machines one by one, and the deterministic simulation.
//!
//! Replay a failing simulation with `COORD_SEED=<seed>` (add `COORD_TRACE=1` for a trace of
//! every event); `COORD_SEEDS=<n>` sets how many random seeds run (default 200).

use proptest::prelude::*;

use super::sim::{Hook, HookOn, Role, Sim, SimConfig};
use super::*;

fn cfg(island: IslandId, islands: usize) -> Config {
    Config {
        island,
        islands,
        max_in_flight: 4,
        timeouts: Timeouts {
            prepare_us: 100,
            commit_retry_us: 50,
            decision_retry_us: 80,
            branch_idle_us: 500,
        },
    }
}

fn all_msgs(gtid: Gtid) -> [Msg; 9] {
    [
        Msg::PrepareReq { gtid },
        Msg::PrepareConf {
            gtid,
            read_only: false,
        },
        Msg::PrepareConf {
            gtid,
            read_only: true,
        },
        Msg::PrepareRef { gtid },
        Msg::CommitReq { gtid },
        Msg::CommitConf { gtid },
        Msg::AbortReq { gtid },
        Msg::AbortConf { gtid },
        Msg::DecisionReq { gtid },
    ]
}

proptest! {
    #[test]
    fn codec_round_trips(gtid in any::<u64>(), which in 0usize..9) {
        let m = all_msgs(gtid)[which];
        let mut b = Vec::new();
        m.encode(&mut b);
        prop_assert_eq!(b.len(), m.encoded_len());
        prop_assert_eq!(Msg::decode(&b), Ok(m));
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
        if let Ok(m) = Msg::decode(&bytes) {
            // Whatever decodes re-encodes to the very same bytes (no slack in the layout).
            let mut b = Vec::new();
            m.encode(&mut b);
            prop_assert_eq!(b, bytes);
        }
    }

    #[test]
    fn corrupted_messages_are_errors_or_exact(gtid in any::<u64>(), which in 0usize..9,
                                              pos in 0usize..10, byte in any::<u8>(), cut in 0usize..11) {
        let mut b = Vec::new();
        all_msgs(gtid)[which].encode(&mut b);
        let p = pos % b.len();
        b[p] = byte;
        b.truncate(cut.min(b.len()));
        if let Ok(m) = Msg::decode(&b) {
            let mut again = Vec::new();
            m.encode(&mut again);
            prop_assert_eq!(again, b);
        }
    }
}

#[test]
fn decode_errors() {
    assert_eq!(Msg::decode(&[]), Err(DecodeError::Empty));
    assert_eq!(Msg::decode(&[0; 9]), Err(DecodeError::UnknownKind(0)));
    assert_eq!(Msg::decode(&[9; 9]), Err(DecodeError::UnknownKind(9)));
    assert!(matches!(
        Msg::decode(&[1; 10]),
        Err(DecodeError::BadLength { kind: 1, .. })
    ));
    assert!(matches!(
        Msg::decode(&[2; 9]),
        Err(DecodeError::BadLength { kind: 2, .. })
    ));
    let mut b = Vec::new();
    Msg::PrepareConf {
        gtid: 7,
        read_only: true,
    }
    .encode(&mut b);
    b[9] = 3;
    assert_eq!(Msg::decode(&b), Err(DecodeError::BadFlags(3)));
}

#[test]
fn gtid_and_island_set() {
    let g = gtid(5, 42);
    assert_eq!(home_of(g), 5);
    assert_eq!(g & ((1 << GTID_SEQ_BITS) - 1), 42);
    let mut s = IslandSet::EMPTY;
    s.insert(3);
    s.insert(127);
    s.insert(0);
    assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 3, 127]);
    assert_eq!(IslandSet::first(128).len(), 128);
    assert_eq!(
        IslandSet::first(3).minus(s).iter().collect::<Vec<_>>(),
        vec![1, 2]
    );
}

fn sends(out: &[Action]) -> Vec<(IslandId, Msg)> {
    out.iter()
        .filter_map(|a| match *a {
            Action::Send { to, msg } => Some((to, msg)),
            _ => None,
        })
        .collect()
}

#[test]
fn coordinator_commit_path_and_read_only() {
    let mut c = Coordinator::new(cfg(0, 3));
    let g = gtid(0, 1);
    let mut out = Vec::new();
    c.begin_commit(g, &[0, 1, 2], 0, &mut out).unwrap();
    assert_eq!(sends(&out).len(), 3);
    out.clear();
    c.on_message(
        0,
        Msg::PrepareConf {
            gtid: g,
            read_only: false,
        },
        1,
        &mut out,
    );
    c.on_message(
        2,
        Msg::PrepareConf {
            gtid: g,
            read_only: true,
        },
        1,
        &mut out,
    );
    assert!(out.is_empty());
    c.on_message(
        1,
        Msg::PrepareConf {
            gtid: g,
            read_only: false,
        },
        2,
        &mut out,
    );
    assert_eq!(
        out,
        vec![Action::Log {
            rec: LogRec::Decision {
                gtid: g,
                commit: true
            },
            force: true,
            token: LogToken(g)
        }]
    );
    out.clear();
    // Nothing is sent before the decision is durable; DecisionReq waits too.
    c.on_message(1, Msg::DecisionReq { gtid: g }, 3, &mut out);
    c.on_tick(1000, &mut out);
    assert!(out.is_empty());
    c.on_log_durable(LogToken(g), 5, &mut out);
    assert_eq!(
        sends(&out),
        vec![
            (0, Msg::CommitReq { gtid: g }),
            (1, Msg::CommitReq { gtid: g })
        ]
    );
    assert!(out.contains(&Action::Outcome {
        gtid: g,
        committed: true
    }));
    out.clear();
    c.on_tick(5 + 50, &mut out); // retransmission to both
    assert_eq!(sends(&out).len(), 2);
    out.clear();
    c.on_message(0, Msg::CommitConf { gtid: g }, 60, &mut out);
    c.on_message(0, Msg::CommitConf { gtid: g }, 60, &mut out);
    assert!(out.is_empty());
    c.on_message(1, Msg::CommitConf { gtid: g }, 61, &mut out);
    assert_eq!(
        out,
        vec![
            Action::Log {
                rec: LogRec::End { gtid: g },
                force: false,
                token: LogToken(g)
            },
            Action::Forget { gtid: g }
        ]
    );
    assert_eq!(c.in_flight(), 0);
    // Presumed abort once forgotten.
    out.clear();
    c.on_message(1, Msg::DecisionReq { gtid: g }, 70, &mut out);
    assert_eq!(sends(&out), vec![(1, Msg::AbortReq { gtid: g })]);
    assert_eq!(c.stats().violations, 0);
}

#[test]
fn coordinator_abort_on_no_and_timeout_and_limits() {
    let mut c = Coordinator::new(cfg(1, 3));
    let mut out = Vec::new();
    assert!(matches!(
        c.begin_commit(gtid(0, 1), &[0, 1], 0, &mut out),
        Err(CoordError::NotHome { .. })
    ));
    assert_eq!(
        c.begin_commit(gtid(1, 1), &[], 0, &mut out),
        Err(CoordError::NoParticipants)
    );
    assert!(matches!(
        c.begin_commit(gtid(1, 1), &[3], 0, &mut out),
        Err(CoordError::BadIsland { .. })
    ));
    let g = gtid(1, 1);
    c.begin_commit(g, &[0, 1, 2], 0, &mut out).unwrap();
    assert_eq!(
        c.begin_commit(g, &[0], 0, &mut out),
        Err(CoordError::Duplicate(g))
    );
    out.clear();
    c.on_message(
        0,
        Msg::PrepareConf {
            gtid: g,
            read_only: true,
        },
        1,
        &mut out,
    );
    c.on_message(
        2,
        Msg::PrepareConf {
            gtid: g,
            read_only: false,
        },
        1,
        &mut out,
    );
    c.on_message(1, Msg::PrepareRef { gtid: g }, 2, &mut out);
    // Only the yes-voter 2 may hold a prepared branch; 0 is read-only, 1 voted no.
    assert_eq!(sends(&out), vec![(2, Msg::AbortReq { gtid: g })]);
    assert!(out.contains(&Action::Outcome {
        gtid: g,
        committed: false
    }));
    assert!(!out.iter().any(|a| matches!(a, Action::Log { .. })));
    // Timeout: the silent participants get AbortReq.
    out.clear();
    let g2 = gtid(1, 2);
    c.begin_commit(g2, &[0, 2], 10, &mut out).unwrap();
    out.clear();
    c.on_message(
        0,
        Msg::PrepareConf {
            gtid: g2,
            read_only: false,
        },
        11,
        &mut out,
    );
    c.on_tick(109, &mut out);
    assert!(out.is_empty());
    c.on_tick(110, &mut out);
    assert_eq!(
        sends(&out),
        vec![
            (0, Msg::AbortReq { gtid: g2 }),
            (2, Msg::AbortReq { gtid: g2 })
        ]
    );
    // A late yes vote for a forgotten gtid is answered abort.
    out.clear();
    c.on_message(
        2,
        Msg::PrepareConf {
            gtid: g2,
            read_only: false,
        },
        120,
        &mut out,
    );
    assert_eq!(sends(&out), vec![(2, Msg::AbortReq { gtid: g2 })]);
    // Bounded.
    for s in 10..14 {
        c.begin_commit(gtid(1, s), &[0], 200, &mut out).unwrap();
    }
    assert_eq!(
        c.begin_commit(gtid(1, 20), &[0], 200, &mut out),
        Err(CoordError::Full { max: 4 })
    );
}

#[test]
fn coordinator_recovery_resends_to_everyone() {
    let mut c = Coordinator::new(cfg(0, 3));
    let (a, b, d) = (gtid(0, 1), gtid(0, 2), gtid(0, 3));
    let log = [
        LogRec::Decision {
            gtid: a,
            commit: true,
        },
        LogRec::Decision {
            gtid: b,
            commit: true,
        },
        LogRec::Prepare { gtid: d },
        LogRec::Decision {
            gtid: gtid(2, 9),
            commit: true,
        }, // another home's: not ours
        LogRec::End { gtid: a },
    ];
    let mut out = Vec::new();
    c.recover(&log, 0, &mut out).unwrap();
    assert_eq!(c.in_flight(), 1);
    assert_eq!(
        sends(&out),
        vec![
            (0, Msg::CommitReq { gtid: b }),
            (1, Msg::CommitReq { gtid: b }),
            (2, Msg::CommitReq { gtid: b })
        ]
    );
}

#[test]
fn recovery_finishes_more_transactions_than_the_restarted_limit() {
    // The log of a run with a larger limit than the restarted island's (4).
    let log: Vec<LogRec> = (1..=10)
        .flat_map(|s| {
            [
                LogRec::Prepare { gtid: gtid(0, s) },
                LogRec::Decision {
                    gtid: gtid(0, s),
                    commit: true,
                },
            ]
        })
        .chain((20..30).map(|s| LogRec::Prepare { gtid: gtid(1, s) }))
        .collect();
    let mut c = Coordinator::new(cfg(0, 2));
    let mut out = Vec::new();
    c.recover(&log, 0, &mut out).unwrap();
    assert_eq!(c.in_flight(), 10, "every decided commit is finished");
    let mut p = Participant::new(cfg(0, 2));
    let mut e = Stub::default();
    let mut pout = Vec::new();
    p.recover(&log, 0, &mut e, &mut pout).unwrap();
    assert_eq!(p.in_flight(), 10, "every undecided branch stays in doubt");
    assert_eq!(e.calls.len(), 10);
}

/// Engine stub for participant unit tests.
#[derive(Default)]
struct Stub {
    vote: Option<Vote>,
    calls: Vec<(&'static str, Gtid)>,
}

impl Branches for Stub {
    fn prepare(&mut self, gtid: Gtid) -> Vote {
        self.calls.push(("prepare", gtid));
        self.vote.unwrap_or(Vote::No)
    }
    fn commit(&mut self, gtid: Gtid) {
        self.calls.push(("commit", gtid));
    }
    fn abort(&mut self, gtid: Gtid) {
        self.calls.push(("abort", gtid));
    }
    fn restore(&mut self, gtid: Gtid) {
        self.calls.push(("restore", gtid));
    }
}

#[test]
fn participant_yes_then_commit() {
    let mut p = Participant::new(cfg(1, 2));
    let mut e = Stub {
        vote: Some(Vote::Yes),
        ..Stub::default()
    };
    let g = gtid(0, 1);
    let mut out = Vec::new();
    p.on_branch_begin(g, 0).unwrap();
    p.on_message(0, Msg::PrepareReq { gtid: g }, 1, &mut e, &mut out);
    assert_eq!(
        out,
        vec![Action::Log {
            rec: LogRec::Prepare { gtid: g },
            force: true,
            token: LogToken(g)
        }]
    );
    out.clear();
    p.on_message(0, Msg::PrepareReq { gtid: g }, 2, &mut e, &mut out);
    assert!(
        out.is_empty(),
        "no vote before the prepare record is durable"
    );
    p.on_log_durable(LogToken(g), 3, &mut out);
    assert_eq!(
        sends(&out),
        vec![(
            0,
            Msg::PrepareConf {
                gtid: g,
                read_only: false
            }
        )]
    );
    out.clear();
    p.on_message(0, Msg::PrepareReq { gtid: g }, 4, &mut e, &mut out);
    assert_eq!(
        sends(&out),
        vec![(
            0,
            Msg::PrepareConf {
                gtid: g,
                read_only: false
            }
        )]
    );
    out.clear();
    p.on_tick(3 + 80, &mut e, &mut out);
    assert_eq!(sends(&out), vec![(0, Msg::DecisionReq { gtid: g })]);
    out.clear();
    p.on_message(0, Msg::CommitReq { gtid: g }, 90, &mut e, &mut out);
    p.on_message(0, Msg::CommitReq { gtid: g }, 91, &mut e, &mut out);
    assert_eq!(
        out,
        vec![Action::Log {
            rec: LogRec::Decision {
                gtid: g,
                commit: true
            },
            force: true,
            token: LogToken(g)
        }]
    );
    out.clear();
    p.on_log_durable(LogToken(g), 95, &mut out);
    assert_eq!(sends(&out), vec![(0, Msg::CommitConf { gtid: g })]);
    out.clear();
    p.on_message(0, Msg::CommitReq { gtid: g }, 96, &mut e, &mut out);
    assert_eq!(sends(&out), vec![(0, Msg::CommitConf { gtid: g })]);
    assert_eq!(p.in_flight(), 0);
    assert_eq!(e.calls, vec![("prepare", g), ("commit", g)]);
    assert_eq!(p.stats().violations, 0);
}

#[test]
fn participant_no_read_only_abort_idle_and_recovery() {
    let mut p = Participant::new(cfg(1, 2));
    let mut e = Stub::default();
    let mut out = Vec::new();
    let (g1, g2, g3, g4) = (gtid(0, 1), gtid(0, 2), gtid(0, 3), gtid(0, 4));
    p.on_message(0, Msg::PrepareReq { gtid: g1 }, 0, &mut e, &mut out);
    assert_eq!(sends(&out), vec![(0, Msg::PrepareRef { gtid: g1 })]);
    out.clear();
    e.vote = Some(Vote::ReadOnly);
    p.on_message(0, Msg::PrepareReq { gtid: g2 }, 0, &mut e, &mut out);
    assert_eq!(
        sends(&out),
        vec![(
            0,
            Msg::PrepareConf {
                gtid: g2,
                read_only: true
            }
        )]
    );
    out.clear();
    // Unknown AbortReq: engine told (no-op there), acked.
    p.on_message(0, Msg::AbortReq { gtid: g3 }, 0, &mut e, &mut out);
    assert_eq!(sends(&out), vec![(0, Msg::AbortConf { gtid: g3 })]);
    out.clear();
    // Idle unprepared branch is aborted.
    p.on_branch_begin(g4, 0).unwrap();
    p.on_tick(499, &mut e, &mut out);
    assert_eq!(p.in_flight(), 1);
    p.on_tick(500, &mut e, &mut out);
    assert_eq!(p.in_flight(), 0);
    assert_eq!(e.calls.last(), Some(&("abort", g4)));
    // Bounded.
    for s in 10..14 {
        p.on_branch_begin(gtid(0, s), 600).unwrap();
    }
    assert!(matches!(
        p.on_branch_begin(gtid(0, 20), 600),
        Err(CoordError::Full { .. })
    ));
    // Recovery: a prepare without a decision is in doubt.
    let mut p = Participant::new(cfg(1, 2));
    let log = [
        LogRec::Prepare { gtid: g1 },
        LogRec::Prepare { gtid: g2 },
        LogRec::Decision {
            gtid: g1,
            commit: true,
        },
        LogRec::Prepare { gtid: g3 },
        LogRec::Decision {
            gtid: g3,
            commit: false,
        },
    ];
    let mut e = Stub::default();
    p.recover(&log, 0, &mut e, &mut out).unwrap();
    assert_eq!(e.calls, vec![("restore", g2)]);
    assert!(out.contains(&Action::Send {
        to: 0,
        msg: Msg::DecisionReq { gtid: g2 }
    }));
    out.clear();
    p.on_message(0, Msg::AbortReq { gtid: g2 }, 1, &mut e, &mut out);
    assert_eq!(p.in_flight(), 0);
    assert!(out.contains(&Action::Send {
        to: 0,
        msg: Msg::AbortConf { gtid: g2 }
    }));
}

/// Over a transport that may deliver copies late, a branch that finished here (committed,
/// aborted, voted no or read-only, idle, or aborted before it began) is not begun again
/// until its tombstone expires; without `keep_tombstones` nothing is remembered.
#[test]
fn participant_tombstones_refuse_finished_branches_until_they_expire() {
    let mut p = Participant::new(cfg(1, 2));
    p.keep_tombstones(1_000);
    let mut e = Stub {
        vote: Some(Vote::Yes),
        ..Stub::default()
    };
    let mut out = Vec::new();
    let g = |s| gtid(0, s);
    // Committed at 10.
    p.on_branch_begin(g(1), 0).unwrap();
    p.on_message(0, Msg::PrepareReq { gtid: g(1) }, 1, &mut e, &mut out);
    p.on_log_durable(LogToken(g(1)), 2, &mut out);
    p.on_message(0, Msg::CommitReq { gtid: g(1) }, 3, &mut e, &mut out);
    p.on_log_durable(LogToken(g(1)), 10, &mut out);
    // Prepared, then aborted at 11.
    p.on_branch_begin(g(2), 0).unwrap();
    p.on_message(0, Msg::PrepareReq { gtid: g(2) }, 1, &mut e, &mut out);
    p.on_message(0, Msg::AbortReq { gtid: g(2) }, 11, &mut e, &mut out);
    // Voted no, read-only, aborted while active, aborted before it began: at 12.
    e.vote = Some(Vote::No);
    p.on_branch_begin(g(3), 0).unwrap();
    p.on_message(0, Msg::PrepareReq { gtid: g(3) }, 12, &mut e, &mut out);
    e.vote = Some(Vote::ReadOnly);
    p.on_message(0, Msg::PrepareReq { gtid: g(4) }, 12, &mut e, &mut out);
    p.on_branch_begin(g(5), 0).unwrap();
    p.on_message(0, Msg::AbortReq { gtid: g(5) }, 12, &mut e, &mut out);
    p.on_message(0, Msg::AbortReq { gtid: g(6) }, 12, &mut e, &mut out);
    // Idle at 600 (begun at 100).
    p.on_branch_begin(g(7), 100).unwrap();
    p.on_tick(600, &mut e, &mut out);
    assert_eq!(p.in_flight(), 0);
    assert_eq!(p.tombstones(), 7);
    for s in 1..=7 {
        assert_eq!(
            p.on_branch_begin(g(s), 700),
            Err(CoordError::Finished(g(s))),
            "gtid {s}"
        );
    }
    assert_eq!(p.in_flight(), 0, "a refused begin holds nothing");
    // Expiry: the first six at 1010..=1012, the idle one at 1600.
    p.on_tick(1_011, &mut e, &mut out);
    assert_eq!(p.tombstones(), 5, "g1 and g2 expired");
    p.on_tick(1_599, &mut e, &mut out);
    assert_eq!(p.tombstones(), 1);
    p.on_branch_begin(g(1), 1_599).unwrap();
    p.on_tick(1_600, &mut e, &mut out);
    assert_eq!(p.tombstones(), 0);
    // Without tombstones a finished gtid begins again (a transport that never
    // duplicates nor delivers late sends no such request).
    let mut p = Participant::new(cfg(1, 2));
    p.on_message(0, Msg::AbortReq { gtid: g(1) }, 0, &mut e, &mut out);
    assert_eq!(p.tombstones(), 0);
    p.on_branch_begin(g(1), 1).unwrap();
}

fn run_seed(cfg: SimConfig) -> super::sim::Report {
    let seed = cfg.seed;
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Sim::new(cfg).run())) {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => panic!("seed {seed} failed: {e}\nreplay: COORD_SEED={seed} COORD_TRACE=1"),
        Err(p) => {
            eprintln!("seed {seed} panicked; replay: COORD_SEED={seed} COORD_TRACE=1");
            std::panic::resume_unwind(p)
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().expect("a number"))
}

#[test]
fn sim_random_faults() {
    let seeds: Vec<u64> = match env_u64("COORD_SEED") {
        Some(s) => vec![s],
        None => (0..env_u64("COORD_SEEDS").unwrap_or(200)).collect(),
    };
    let t = std::time::Instant::now();
    let (mut committed, mut aborted, mut crashes, mut msgs) = (0, 0, 0, 0);
    let (mut reservations, mut incarnations) = (0, 0);
    for &seed in &seeds {
        let r = run_seed(SimConfig::new(seed));
        if seeds.len() == 1 {
            eprintln!("{r:?}");
        }
        committed += r.committed;
        aborted += r.aborted;
        crashes += r.crashes;
        msgs += r.messages;
        reservations += r.reservations;
        incarnations = incarnations.max(r.incarnations);
    }
    eprintln!(
        "{} seeds in {:?}: {committed} committed, {aborted} aborted, {crashes} crashes, {msgs} messages, \
         {reservations} gtid reservations, up to incarnation {incarnations}",
        seeds.len(),
        t.elapsed()
    );
    if seeds.len() > 1 {
        assert!(committed > 0 && aborted > 0 && crashes > 0);
        // One island restarts while the others run, with reservations in flight.
        assert!(reservations > 0 && incarnations > 2);
    }
}

#[test]
fn sim_without_faults_commits_what_does_not_conflict() {
    let mut cfg = SimConfig::new(7);
    cfg.crash_ppm = 0;
    cfg.drop_ppm = 0;
    cfg.dup_ppm = 0;
    cfg.submit_ppm = 20_000; // few conflicts
    let r = run_seed(cfg);
    assert!(r.committed > 0);
    assert!(r.committed * 10 > r.aborted * 9, "{r:?}");
}

fn is_send(a: &Action, pred: fn(&Msg) -> bool) -> bool {
    matches!(a, Action::Send { msg, .. } if pred(msg))
}

/// Crash points, each at the first few times the protocol passes them.
fn crash_points() -> Vec<(&'static str, Role, HookOn)> {
    vec![
        (
            "coordinator before sending PrepareReq",
            Role::Coord,
            HookOn::ActionBefore(|a| is_send(a, |m| matches!(m, Msg::PrepareReq { .. }))),
        ),
        (
            "participant after logging Prepare (not yet durable)",
            Role::Part,
            HookOn::ActionAfter(|a| {
                matches!(
                    a,
                    Action::Log {
                        rec: LogRec::Prepare { .. },
                        ..
                    }
                )
            }),
        ),
        (
            "participant with Prepare durable, before sending PrepareConf",
            Role::Part,
            HookOn::ActionBefore(|a| {
                is_send(a, |m| {
                    matches!(
                        m,
                        Msg::PrepareConf {
                            read_only: false,
                            ..
                        }
                    )
                })
            }),
        ),
        (
            "participant after sending PrepareConf",
            Role::Part,
            HookOn::ActionAfter(|a| {
                is_send(a, |m| {
                    matches!(
                        m,
                        Msg::PrepareConf {
                            read_only: false,
                            ..
                        }
                    )
                })
            }),
        ),
        (
            "coordinator after a vote arrived",
            Role::Coord,
            HookOn::Delivered(|m| matches!(m, Msg::PrepareConf { .. })),
        ),
        (
            "coordinator after logging Decision (not yet durable)",
            Role::Coord,
            HookOn::ActionAfter(|a| {
                matches!(
                    a,
                    Action::Log {
                        rec: LogRec::Decision { .. },
                        ..
                    }
                )
            }),
        ),
        (
            "coordinator with Decision durable, before sending CommitReq",
            Role::Coord,
            HookOn::ActionBefore(|a| is_send(a, |m| matches!(m, Msg::CommitReq { .. }))),
        ),
        (
            "coordinator after sending the first CommitReq",
            Role::Coord,
            HookOn::ActionAfter(|a| is_send(a, |m| matches!(m, Msg::CommitReq { .. }))),
        ),
        (
            "coordinator after a CommitConf arrived",
            Role::Coord,
            HookOn::Delivered(|m| matches!(m, Msg::CommitConf { .. })),
        ),
        (
            "coordinator after logging End",
            Role::Coord,
            HookOn::ActionAfter(|a| {
                matches!(
                    a,
                    Action::Log {
                        rec: LogRec::End { .. },
                        ..
                    }
                )
            }),
        ),
        (
            "participant after CommitReq, commit record not durable",
            Role::Part,
            HookOn::ActionAfter(|a| {
                matches!(
                    a,
                    Action::Log {
                        rec: LogRec::Decision { commit: true, .. },
                        ..
                    }
                )
            }),
        ),
        (
            "participant with commit durable, before CommitConf",
            Role::Part,
            HookOn::ActionBefore(|a| is_send(a, |m| matches!(m, Msg::CommitConf { .. }))),
        ),
        (
            "participant after an abort",
            Role::Part,
            HookOn::ActionAfter(|a| is_send(a, |m| matches!(m, Msg::AbortConf { .. }))),
        ),
        (
            "coordinator after sending AbortReq",
            Role::Coord,
            HookOn::ActionAfter(|a| is_send(a, |m| matches!(m, Msg::AbortReq { .. }))),
        ),
        (
            "participant after sending DecisionReq",
            Role::Part,
            HookOn::ActionAfter(|a| is_send(a, |m| matches!(m, Msg::DecisionReq { .. }))),
        ),
    ]
}

#[test]
fn sim_crash_at_every_protocol_step() {
    let t = std::time::Instant::now();
    let seeds = env_u64("COORD_POINT_SEEDS").unwrap_or(20);
    for (n, (name, role, on)) in crash_points().into_iter().enumerate() {
        let mut fired = 0;
        for s in 0..seeds {
            let seed = 10_000 + 100 * n as u64 + s;
            if env_u64("COORD_SEED").is_some_and(|x| x != seed) {
                continue;
            }
            let mut cfg = SimConfig::new(seed);
            cfg.crash_ppm = 0; // only the scheduled crashes
            if s % 2 == 0 {
                cfg.drop_ppm = 0;
                cfg.dup_ppm = 0;
            }
            // Crash every island at this point a few times (home and remote alike).
            cfg.hooks = (0..cfg.islands)
                .map(|island| Hook {
                    island,
                    role,
                    on,
                    times: 3,
                })
                .collect();
            let r = run_seed(cfg);
            fired += r.hooks_fired;
        }
        assert!(
            fired > 0 || env_u64("COORD_SEED").is_some(),
            "crash point never reached: {name}"
        );
        eprintln!("{name}: {fired} crashes");
    }
    eprintln!("crash points in {:?}", t.elapsed());
}

#[test]
fn sim_replays_a_seed_exactly() {
    for seed in [1, 2, 3] {
        let a = format!("{:?}", run_seed(SimConfig::new(seed)));
        let b = format!("{:?}", run_seed(SimConfig::new(seed)));
        assert_eq!(a, b, "seed {seed} is not deterministic");
    }
}

/// The hazard that incarnations remove: island 1 holds a prepared branch of transaction `a`
/// (home: island 0) when the home crashes before any decision (its log holds nothing of
/// `a`: presumed abort). The home restarts alone and begins transaction `b`, with island 2;
/// island 2 crashes before it acknowledges `b`'s commit, so the home holds `b` decided
/// while island 1 asks it about `a`. Were `b` named like `a`, the home would answer
/// "commit", and island 1 would install `a`'s credit, whose debit aborted.
fn home_restarts_alone_under_a_prepared_branch(
    reserve_gtids: bool,
) -> (Result<super::sim::Report, String>, Gtid, Option<Gtid>) {
    let mut cfg = SimConfig::new(3);
    cfg.islands = 3;
    cfg.submit_ppm = 0;
    cfg.crash_ppm = 0;
    cfg.drop_ppm = 0;
    cfg.dup_ppm = 0;
    cfg.fsync_slow_ppm = 0;
    cfg.down_min_us = 400;
    cfg.down_max_us = 400;
    cfg.reserve_gtids = reserve_gtids;
    cfg.hooks = vec![
        Hook {
            island: 0,
            role: Role::Coord,
            on: HookOn::ActionAfter(|a| {
                matches!(
                    a,
                    Action::Send {
                        to: 1,
                        msg: Msg::PrepareReq { .. }
                    }
                )
            }),
            times: 1,
        },
        Hook {
            island: 2,
            role: Role::Part,
            on: HookOn::ActionBefore(|a| is_send(a, |m| matches!(m, Msg::CommitConf { .. }))),
            times: 1,
        },
    ];
    let mut sim = Sim::new(cfg);
    let a = sim.transfer(0, (0, 0), (1, 0), 10).expect("a is submitted");
    // The home crashed at once; it is down for 400 µs, and island 1 prepared meanwhile.
    sim.advance(420);
    let b = sim.transfer(0, (0, 1), (2, 1), 5);
    sim.advance(1500);
    (sim.finish(), a, b)
}

#[test]
fn a_home_that_restarts_alone_never_commits_a_branch_it_aborted() {
    let (r, a, b) = home_restarts_alone_under_a_prepared_branch(true);
    let r = r.unwrap_or_else(|e| panic!("{e}"));
    let b = b.expect("b is submitted after the home restarted");
    assert_ne!(a, b, "the restarted home named b like a");
    assert_eq!(r.hooks_fired, 2, "both scripted crashes happened: {r:?}");
    assert!(
        r.presumed_aborts >= 1,
        "island 1 asked about a and heard abort: {r:?}"
    );
    assert!(r.incarnations >= 2, "{r:?}");
    assert_eq!((r.committed, r.aborted), (1, 1), "{r:?}");
}

/// The same script with gtids drawn above the home's own log only (the rule before
/// incarnations): the check must see the hazard, or the test above proves nothing.
#[test]
fn without_reservations_the_restarted_home_commits_the_aborted_branch() {
    let (r, a, b) = home_restarts_alone_under_a_prepared_branch(false);
    assert_eq!(b, Some(a), "the restarted home drew a's gtid again");
    let e = r.expect_err("the check sees the hazard");
    assert!(e.contains("total balance"), "{e}");
}
