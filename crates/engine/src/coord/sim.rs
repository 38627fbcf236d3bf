//! Deterministic simulator for the 2PC state machines (FoundationDB style).
//!
//! K islands, each with a [`Coordinator`], a [`Participant`], a tiny bank engine
//! ([`Engine`]: account balances, one no-wait lock per account) and a simulated log whose
//! records become durable only when a forced flush completes; a crash drops everything not
//! yet durable. A network on a seeded random generator delays (which reorders), drops and
//! duplicates messages, always through `Msg::encode` / `Msg::decode`. Clients submit
//! transfers: debit on one island, credit on another, sometimes a read-only branch on a
//! third; the home island's own branch is an ordinary participant that talks to its
//! coordinator through the network (messages to oneself included). Branch execution (the
//! remote operations before commit) is modelled as instantaneous: at submission each up
//! participant island executes its branch and registers it with `on_branch_begin`.
//!
//! Each island draws its gtids as the executor does ([`SeqDraw`]) below a reservation kept
//! in a simulated control file, which survives a crash with the log; a reservation asked for
//! becomes durable after an fsync delay, and a crash before then loses it. A crash loses the
//! island's volatile state (its machines, its engine's branches, its drawer) while the other
//! islands run on; the restart is a new incarnation, which draws above the last durable
//! reservation and above every gtid of its own log (all it can see). With
//! [`SimConfig::reserve_gtids`] off, it draws above its own log only, as recovery did before
//! incarnations: the check then finds the gtids it handed out twice.
//!
//! Everything (time, scheduling, faults) derives from the seed; iteration is over ordered
//! containers only, so a seed replays exactly.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

use super::gtids::SeqDraw;
use super::{
    gtid, home_of, Action, Branches, Config, Coordinator, Gtid, IslandId, LogRec, LogToken, Msg,
    Participant, Timeouts, Vote,
};

/// splitmix64: small, fast, and its sequence never changes with a dependency upgrade.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub(super) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform in `lo..=hi`.
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    /// True with probability `per_million` / 1e6.
    pub(super) fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Role {
    Coord,
    Part,
}

/// Crash an island when one of its machines emits a matching action (before or after the
/// action takes effect), or right after it handled a matching message.
#[derive(Clone, Copy)]
pub(super) struct Hook {
    pub island: usize,
    pub role: Role,
    pub on: HookOn,
    /// How many times it may still fire.
    pub times: u32,
}

#[derive(Clone, Copy)]
pub(super) enum HookOn {
    ActionBefore(fn(&Action) -> bool),
    ActionAfter(fn(&Action) -> bool),
    Delivered(fn(&Msg) -> bool),
}

#[derive(Clone)]
pub(super) struct SimConfig {
    pub seed: u64,
    pub islands: usize,
    pub accounts: usize,
    pub initial_balance: i64,
    /// Steps (1 step = 1 µs of simulated time) with clients and faults.
    pub fault_steps: u64,
    /// Steps allowed afterwards to reach quiescence.
    pub quiesce_steps: u64,
    pub submit_ppm: u64,
    pub read_only_ppm: u64,
    pub drop_ppm: u64,
    pub dup_ppm: u64,
    pub delay_max_us: u64,
    pub fsync_max_us: u64,
    /// A slow fsync (a disk hiccup): this often, up to `fsync_slow_max_us`.
    pub fsync_slow_ppm: u64,
    pub fsync_slow_max_us: u64,
    /// Per island per step.
    pub crash_ppm: u64,
    pub down_min_us: u64,
    pub down_max_us: u64,
    pub max_in_flight: usize,
    pub timeouts: Timeouts,
    pub hooks: Vec<Hook>,
    pub trace: bool,
    /// Gtid sequence numbers reserved per control-file write (small, so that runs reserve
    /// often and crashes land in the middle of reservations).
    pub gtid_chunk: u64,
    /// Draw gtids below a durable reservation (off: above the island's own log only, the
    /// rule before incarnations, which reuses gtids; for tests that show the hazard).
    pub reserve_gtids: bool,
}

impl SimConfig {
    pub(super) fn new(seed: u64) -> Self {
        SimConfig {
            seed,
            islands: 2 + (seed % 3) as usize,
            accounts: 64,
            initial_balance: 1000,
            fault_steps: 3000,
            quiesce_steps: 20_000,
            submit_ppm: 60_000,
            read_only_ppm: 300_000,
            drop_ppm: 50_000,
            dup_ppm: 50_000,
            delay_max_us: 30,
            fsync_max_us: 15,
            fsync_slow_ppm: 10_000,
            fsync_slow_max_us: 300,
            crash_ppm: 400,
            down_min_us: 20,
            down_max_us: 400,
            max_in_flight: 12,
            timeouts: Timeouts {
                prepare_us: 200,
                commit_retry_us: 100,
                decision_retry_us: 300,
                branch_idle_us: 600,
            },
            hooks: Vec::new(),
            trace: std::env::var_os("COORD_TRACE").is_some(),
            gtid_chunk: 8,
            reserve_gtids: true,
        }
    }
}

struct Branch {
    accounts: Vec<usize>,
    writes: Vec<(usize, i64)>,
    doomed: bool,
}

/// The bank engine of one island.
pub(super) struct Engine {
    balances: Vec<i64>,
    locks: Vec<Option<Gtid>>,
    branches: BTreeMap<Gtid, Branch>,
    /// Gtids whose writes are installed.
    applied: BTreeSet<Gtid>,
    /// Writes of every durable Prepare record (for `restore`).
    prepared_writes: BTreeMap<Gtid, Vec<(usize, i64)>>,
}

impl Engine {
    fn new(accounts: usize, initial_balance: i64) -> Self {
        Engine {
            balances: vec![initial_balance; accounts],
            locks: vec![None; accounts],
            branches: BTreeMap::new(),
            applied: BTreeSet::new(),
            prepared_writes: BTreeMap::new(),
        }
    }

    /// Recovery: the durable state is the initial one plus every prepared branch whose
    /// commit decision is in the log.
    fn rebuild(accounts: usize, initial_balance: i64, log: &[Entry]) -> Self {
        let mut e = Engine::new(accounts, initial_balance);
        for ent in log {
            match ent.rec {
                LogRec::Prepare { gtid } => {
                    e.prepared_writes.insert(gtid, ent.writes.clone());
                }
                LogRec::Decision { gtid, commit: true } => {
                    if let Some(w) = e.prepared_writes.get(&gtid) {
                        if e.applied.insert(gtid) {
                            for &(a, d) in w {
                                e.balances[a] += d;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        e
    }

    /// Runs a branch: `ops` are (account, delta), delta 0 = read. No-wait locking: a
    /// conflict dooms the branch (it will vote no) and takes no locks.
    fn execute(&mut self, gtid: Gtid, ops: &[(usize, i64)]) {
        let doomed = ops
            .iter()
            .any(|&(a, _)| self.locks[a].is_some_and(|g| g != gtid));
        let mut b = Branch {
            accounts: Vec::new(),
            writes: Vec::new(),
            doomed,
        };
        if !doomed {
            for &(a, d) in ops {
                self.locks[a] = Some(gtid);
                b.accounts.push(a);
                if d != 0 {
                    b.writes.push((a, d));
                }
            }
        }
        assert!(self.branches.insert(gtid, b).is_none());
    }

    fn release(&mut self, b: &Branch, gtid: Gtid) {
        for &a in &b.accounts {
            if self.locks[a] == Some(gtid) {
                self.locks[a] = None;
            }
        }
    }
}

impl Branches for Engine {
    fn prepare(&mut self, gtid: Gtid) -> Vote {
        match self.branches.get(&gtid) {
            None => Vote::No,
            Some(b) if b.doomed => Vote::No,
            Some(b) if b.writes.is_empty() => Vote::ReadOnly,
            Some(_) => Vote::Yes,
        }
    }
    fn commit(&mut self, gtid: Gtid) {
        let b = self
            .branches
            .remove(&gtid)
            .expect("commit of a known branch");
        for &(a, d) in &b.writes {
            self.balances[a] += d;
        }
        if !b.writes.is_empty() {
            assert!(self.applied.insert(gtid), "gtid {gtid:#x} applied twice");
        }
        self.release(&b, gtid);
    }
    fn abort(&mut self, gtid: Gtid) {
        if let Some(b) = self.branches.remove(&gtid) {
            self.release(&b, gtid);
        }
    }
    fn restore(&mut self, gtid: Gtid) {
        let writes = self.prepared_writes[&gtid].clone();
        let mut b = Branch {
            accounts: Vec::new(),
            writes: writes.clone(),
            doomed: false,
        };
        for &(a, _) in &writes {
            assert!(
                self.locks[a].is_none(),
                "in-doubt branches {gtid:#x} and {:#x} both lock account {a}",
                self.locks[a].unwrap_or(0)
            );
            self.locks[a] = Some(gtid);
            b.accounts.push(a);
        }
        assert!(self.branches.insert(gtid, b).is_none());
    }
}

struct Entry {
    rec: LogRec,
    writes: Vec<(usize, i64)>,
    owner: Role,
    force: bool,
}

#[derive(Default)]
struct SimLog {
    entries: Vec<Entry>,
    durable: usize,
    /// (completes at, durable up to), in completion order.
    flushes: VecDeque<(u64, usize)>,
}

/// The durable part of an island's control file that the simulation models.
#[derive(Clone, Copy, Debug)]
struct SimControl {
    /// Opens of the island so far.
    incarnation: u64,
    /// Gtid sequence numbers below this are reserved (exclusive bound).
    reserved: u64,
}

struct Island {
    up: bool,
    restart_at: u64,
    coord: Coordinator,
    part: Participant,
    engine: Engine,
    log: SimLog,
    control: SimControl,
    /// Volatile: where this incarnation draws its gtids.
    draw: SeqDraw,
    /// Volatile: a control-file write in flight (completes at, reserves below).
    reserving: Option<(u64, u64)>,
}

struct TxnInfo {
    home: usize,
    writers: Vec<usize>,
}

type Packet = Reverse<(u64, u64, usize, usize, Vec<u8>)>;

/// Summary of a run.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub submitted: usize,
    pub committed: usize,
    pub aborted: usize,
    pub crashes: usize,
    pub hooks_fired: usize,
    pub messages: u64,
    pub quiesce_us: u64,
    /// Summed over the final incarnation of each island's machines.
    pub votes_no: u64,
    pub refused_full: u64,
    pub idle_aborts: u64,
    pub presumed_aborts: u64,
    /// Control-file writes that extended a gtid reservation.
    pub reservations: u64,
    /// The highest incarnation any island reached.
    pub incarnations: u64,
}

pub(super) struct Sim {
    cfg: SimConfig,
    rng: Rng,
    now: u64,
    faults: bool,
    islands: Vec<Island>,
    net: BinaryHeap<Packet>,
    net_seq: u64,
    txns: BTreeMap<Gtid, TxnInfo>,
    /// Gtids handed out a second time (a violation, reported by the check).
    reused: Vec<Gtid>,
    outcomes: BTreeMap<Gtid, bool>,
    report: Report,
}

impl Sim {
    pub(super) fn new(cfg: SimConfig) -> Self {
        let islands = (0..cfg.islands)
            .map(|i| {
                let mut isl = Island {
                    up: true,
                    restart_at: 0,
                    coord: Coordinator::new(machine_config(&cfg, i)),
                    part: Participant::new(machine_config(&cfg, i)),
                    engine: Engine::new(cfg.accounts, cfg.initial_balance),
                    log: SimLog::default(),
                    control: SimControl {
                        incarnation: 0,
                        reserved: 1,
                    },
                    draw: SeqDraw::new(1, cfg.gtid_chunk),
                    reserving: None,
                };
                isl.open(&cfg);
                isl
            })
            .collect();
        Sim {
            rng: Rng::new(cfg.seed),
            now: 0,
            faults: true,
            islands,
            net: BinaryHeap::new(),
            net_seq: 0,
            txns: BTreeMap::new(),
            reused: Vec::new(),
            outcomes: BTreeMap::new(),
            report: Report::default(),
            cfg,
        }
    }

    /// Runs the fault phase, then heals everything and runs to quiescence, then checks.
    pub(super) fn run(mut self) -> Result<Report, String> {
        self.advance(self.cfg.fault_steps);
        self.finish()
    }

    /// Runs `steps` steps with clients and faults (a scripted run submits its own transfers
    /// between calls, with [`Sim::transfer`]).
    pub(super) fn advance(&mut self, steps: u64) {
        for _ in 0..steps {
            self.step(true);
        }
    }

    /// Heals everything, runs to quiescence, then checks the invariants.
    pub(super) fn finish(mut self) -> Result<Report, String> {
        self.faults = false;
        for i in 0..self.islands.len() {
            if !self.islands[i].up {
                self.restart(i);
            }
        }
        let start = self.now;
        let mut quiet = false;
        for _ in 0..self.cfg.quiesce_steps {
            self.step(false);
            if self.quiescent() {
                quiet = true;
                break;
            }
        }
        self.report.quiesce_us = self.now - start;
        if !quiet {
            return Err(format!(
                "not quiescent after {} µs: {}",
                self.cfg.quiesce_steps,
                self.dump()
            ));
        }
        self.check()?;
        for isl in &self.islands {
            let (c, p) = (isl.coord.stats(), isl.part.stats());
            self.report.votes_no += p.voted_no;
            self.report.refused_full += p.refused_full;
            self.report.idle_aborts += p.idle_aborts;
            self.report.presumed_aborts += c.presumed_aborts;
        }
        Ok(self.report)
    }

    fn step(&mut self, clients: bool) {
        self.now += 1;
        let now = self.now;
        for i in 0..self.islands.len() {
            if !self.islands[i].up && self.islands[i].restart_at <= now {
                self.restart(i);
            }
        }
        if self.faults {
            for i in 0..self.islands.len() {
                if self.islands[i].up && self.rng.chance(self.cfg.crash_ppm) {
                    self.crash(i);
                }
            }
        }
        if clients && self.rng.chance(self.cfg.submit_ppm) {
            self.submit();
        }
        for i in 0..self.islands.len() {
            self.complete_flushes(i);
            self.complete_reservation(i);
        }
        self.deliver();
        for i in 0..self.islands.len() {
            if !self.islands[i].up {
                continue;
            }
            let mut out = Vec::new();
            self.islands[i].coord.on_tick(now, &mut out);
            self.apply(i, Role::Coord, out);
            if !self.islands[i].up {
                continue;
            }
            let mut out = Vec::new();
            let isl = &mut self.islands[i];
            isl.part.on_tick(now, &mut isl.engine, &mut out);
            self.apply(i, Role::Part, out);
        }
    }

    fn trace(&self, what: std::fmt::Arguments<'_>) {
        if self.cfg.trace {
            eprintln!("[{:>6}] {what}", self.now);
        }
    }

    fn submit(&mut self) {
        let k = self.islands.len() as u64;
        let home = self.rng.below(k) as usize;
        let other = (home + 1 + self.rng.below(k - 1) as usize) % self.islands.len();
        let amount = self.rng.range(1, 50) as i64;
        let (from, to) = if self.rng.chance(500_000) {
            (home, other)
        } else {
            (other, home)
        };
        let reader = if k >= 3 && self.rng.chance(self.cfg.read_only_ppm) {
            (0..self.islands.len()).find(|&r| r != home && r != other)
        } else {
            None
        };
        let accts = self.cfg.accounts as u64;
        let a_from = self.rng.below(accts) as usize;
        let a_to = self.rng.below(accts) as usize;
        let a_read = self.rng.below(accts) as usize;
        let mut branches = vec![(from, vec![(a_from, -amount)]), (to, vec![(a_to, amount)])];
        if let Some(r) = reader {
            branches.push((r, vec![(a_read, 0)]));
        }
        self.submit_branches(home, from, to, branches);
    }

    /// Submits a transfer of `amount` from account `a_from` of island `from` to account
    /// `a_to` of island `to`, coordinated by `home`: its gtid, or `None` if the home is down,
    /// full, or waits for a gtid reservation.
    pub(super) fn transfer(
        &mut self,
        home: usize,
        (from, a_from): (usize, usize),
        (to, a_to): (usize, usize),
        amount: i64,
    ) -> Option<Gtid> {
        let branches = vec![(from, vec![(a_from, -amount)]), (to, vec![(a_to, amount)])];
        self.submit_branches(home, from, to, branches)
    }

    fn submit_branches(
        &mut self,
        home: usize,
        from: usize,
        to: usize,
        branches: Vec<(usize, Vec<(usize, i64)>)>,
    ) -> Option<Gtid> {
        if !self.islands[home].up || self.islands[home].coord.is_full() {
            return None;
        }
        let seq = self.draw_seq(home)?;
        let g = gtid(home as IslandId, seq);
        let now = self.now;
        let mut participants = Vec::new();
        for (p, ops) in &branches {
            participants.push(*p as IslandId);
            let isl = &mut self.islands[*p];
            if !isl.up {
                continue; // the branch never ran there; that participant will vote no
            }
            isl.engine.execute(g, ops);
            if isl.part.on_branch_begin(g, now).is_err() {
                isl.engine.abort(g);
            }
        }
        self.trace(format_args!("submit {g:#x} {branches:?}"));
        if self.txns.contains_key(&g) {
            self.reused.push(g);
        }
        self.txns.insert(
            g,
            TxnInfo {
                home,
                writers: vec![from, to],
            },
        );
        self.report.submitted += 1;
        let mut out = Vec::new();
        self.islands[home]
            .coord
            .begin_commit(g, &participants, now, &mut out)
            .expect("begin_commit on a coordinator with room");
        self.apply(home, Role::Coord, out);
        Some(g)
    }

    /// Performs a machine's actions in order; a hook may crash the island midway, and the
    /// remaining actions die with it.
    fn apply(&mut self, i: usize, role: Role, out: Vec<Action>) {
        for a in out {
            if !self.islands[i].up {
                return;
            }
            let mut after = false;
            for h in self.cfg.hooks.iter_mut() {
                if h.times == 0 || h.island != i || h.role != role {
                    continue;
                }
                match h.on {
                    HookOn::ActionBefore(f) if f(&a) => {
                        h.times -= 1;
                        self.report.hooks_fired += 1;
                        self.trace(format_args!("hook: crash {i} before {a:?}"));
                        self.crash(i);
                        return;
                    }
                    HookOn::ActionAfter(f) if f(&a) => {
                        h.times -= 1;
                        self.report.hooks_fired += 1;
                        after = true;
                    }
                    _ => {}
                }
            }
            self.perform(i, role, a);
            if after {
                self.trace(format_args!("hook: crash {i} after {a:?}"));
                self.crash(i);
                return;
            }
        }
    }

    fn perform(&mut self, i: usize, role: Role, a: Action) {
        self.trace(format_args!("{i} {role:?} {a:?}"));
        match a {
            Action::Send { to, msg } => self.send(i, usize::from(to), msg),
            Action::Log { rec, force, .. } => {
                let isl = &mut self.islands[i];
                let writes = match rec {
                    LogRec::Prepare { gtid } => isl.engine.branches[&gtid].writes.clone(),
                    _ => Vec::new(),
                };
                isl.log.entries.push(Entry {
                    rec,
                    writes,
                    owner: role,
                    force,
                });
                if force {
                    let max = if self.rng.chance(self.cfg.fsync_slow_ppm) {
                        self.cfg.fsync_slow_max_us
                    } else {
                        self.cfg.fsync_max_us
                    };
                    let after = self.now + self.rng.range(1, max);
                    let log = &mut self.islands[i].log;
                    let at = log.flushes.back().map_or(after, |&(t, _)| t.max(after));
                    let upto = log.entries.len();
                    log.flushes.push_back((at, upto));
                }
            }
            Action::Outcome { gtid, committed } => {
                if let Some(&prev) = self.outcomes.get(&gtid) {
                    assert_eq!(prev, committed, "outcome of {gtid:#x} flipped");
                }
                self.outcomes.insert(gtid, committed);
            }
            Action::Forget { .. } => {}
        }
    }

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        self.report.messages += 1;
        let mut bytes = Vec::with_capacity(msg.encoded_len());
        msg.encode(&mut bytes);
        assert_eq!(bytes.len(), msg.encoded_len());
        let copies = if !self.faults {
            1
        } else if self.rng.chance(self.cfg.drop_ppm) {
            0
        } else if self.rng.chance(self.cfg.dup_ppm) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = self.now + self.rng.range(1, self.cfg.delay_max_us);
            self.net_seq += 1;
            self.net
                .push(Reverse((at, self.net_seq, from, to, bytes.clone())));
        }
    }

    fn deliver(&mut self) {
        while let Some(Reverse((at, ..))) = self.net.peek() {
            if *at > self.now {
                break;
            }
            let Reverse((_, _, from, to, bytes)) = self.net.pop().expect("peeked");
            if !self.islands[to].up {
                continue;
            }
            let msg = Msg::decode(&bytes).expect("the simulator sends well-formed messages");
            self.trace(format_args!("deliver {from}->{to} {msg:?}"));
            let now = self.now;
            let mut out = Vec::new();
            let role = if msg.to_participant() {
                let isl = &mut self.islands[to];
                isl.part
                    .on_message(from as IslandId, msg, now, &mut isl.engine, &mut out);
                Role::Part
            } else {
                self.islands[to]
                    .coord
                    .on_message(from as IslandId, msg, now, &mut out);
                Role::Coord
            };
            self.apply(to, role, out);
            if !self.islands[to].up {
                continue;
            }
            for h in self.cfg.hooks.iter_mut() {
                if let HookOn::Delivered(f) = h.on {
                    if h.times > 0 && h.island == to && h.role == role && f(&msg) {
                        h.times -= 1;
                        self.report.hooks_fired += 1;
                        if self.cfg.trace {
                            eprintln!("[{:>6}] hook: crash {to} after handling {msg:?}", self.now);
                        }
                        self.crash(to);
                        break;
                    }
                }
            }
        }
    }

    fn complete_flushes(&mut self, i: usize) {
        if !self.islands[i].up {
            return;
        }
        let mut durable_now = Vec::new();
        {
            let log = &mut self.islands[i].log;
            while let Some(&(at, upto)) = log.flushes.front() {
                if at > self.now {
                    break;
                }
                log.flushes.pop_front();
                if upto > log.durable {
                    for e in &log.entries[log.durable..upto] {
                        if e.force {
                            durable_now.push((e.owner, e.rec.gtid()));
                        }
                    }
                    log.durable = upto;
                }
            }
        }
        let now = self.now;
        for (owner, g) in durable_now {
            if !self.islands[i].up {
                return;
            }
            let mut out = Vec::new();
            match owner {
                Role::Coord => self.islands[i]
                    .coord
                    .on_log_durable(LogToken(g), now, &mut out),
                Role::Part => self.islands[i]
                    .part
                    .on_log_durable(LogToken(g), now, &mut out),
            }
            self.apply(i, owner, out);
        }
    }

    fn crash(&mut self, i: usize) {
        let down = self.rng.range(self.cfg.down_min_us, self.cfg.down_max_us);
        let isl = &mut self.islands[i];
        isl.up = false;
        isl.restart_at = self.now + down;
        isl.log.entries.truncate(isl.log.durable);
        isl.log.flushes.clear();
        isl.reserving = None;
        let durable = isl.log.durable;
        self.report.crashes += 1;
        self.trace(format_args!("crash {i} (durable log: {durable} records)"));
    }

    fn restart(&mut self, i: usize) {
        let cfg = machine_config(&self.cfg, i);
        let now = self.now;
        let isl = &mut self.islands[i];
        isl.up = true;
        isl.engine = Engine::rebuild(
            self.cfg.accounts,
            self.cfg.initial_balance,
            &isl.log.entries,
        );
        isl.coord = Coordinator::new(cfg);
        isl.part = Participant::new(cfg);
        isl.open(&self.cfg);
        let records: Vec<LogRec> = isl.log.entries.iter().map(|e| e.rec).collect();
        // As the executor's recovery: never below a gtid of this island in its own log.
        for r in &records {
            if usize::from(home_of(r.gtid())) == i {
                isl.draw
                    .skip_past(r.gtid() & ((1 << super::GTID_SEQ_BITS) - 1));
            }
        }
        let mut out = Vec::new();
        isl.coord
            .recover(&records, now, &mut out)
            .expect("recovered commits fit");
        let mut out2 = Vec::new();
        isl.part
            .recover(&records, now, &mut isl.engine, &mut out2)
            .expect("in-doubt branches fit");
        self.trace(format_args!("restart {i}"));
        self.apply(i, Role::Coord, out);
        self.apply(i, Role::Part, out2);
    }

    /// The next gtid sequence number of island `i`'s drawer, asking for a reservation when
    /// it runs low; `None` while the reservation it needs is not durable yet.
    fn draw_seq(&mut self, i: usize) -> Option<u64> {
        if let Some(s) = self.islands[i].draw.take() {
            return Some(s);
        }
        let isl = &mut self.islands[i];
        let r = isl.draw.renew(isl.control.reserved);
        if let Some(want) = r.ask {
            if isl.reserving.is_none_or(|(_, upto)| upto < want) {
                let at = self.now + self.rng.range(1, self.cfg.fsync_max_us);
                let isl = &mut self.islands[i];
                // One control-file write at a time; a later ask extends the one in flight.
                let at = isl.reserving.map_or(at, |(t, _)| t.max(at));
                isl.reserving = Some((at, want));
            }
        }
        if !r.ready {
            return None;
        }
        self.islands[i].draw.take()
    }

    fn complete_reservation(&mut self, i: usize) {
        let isl = &mut self.islands[i];
        if let Some((at, upto)) = isl.reserving {
            if isl.up && at <= self.now {
                isl.reserving = None;
                isl.control.reserved = isl.control.reserved.max(upto);
                self.report.reservations += 1;
                self.trace(format_args!("island {i} reserved gtids below {upto}"));
            }
        }
    }

    fn quiescent(&self) -> bool {
        self.net.is_empty()
            && self.islands.iter().all(|isl| {
                isl.up
                    && isl.log.flushes.is_empty()
                    && isl.coord.in_flight() == 0
                    && isl.part.in_flight() == 0
            })
    }

    fn dump(&self) -> String {
        let mut s = String::new();
        for (i, isl) in self.islands.iter().enumerate() {
            s += &format!(
                "\n island {i}: up {} coord {} part {} engine branches {:x?} flushes {}",
                isl.up,
                isl.coord.in_flight(),
                isl.part.in_flight(),
                isl.engine.branches.keys().collect::<Vec<_>>(),
                isl.log.flushes.len()
            );
        }
        s + &format!("\n network: {} packets", self.net.len())
    }

    /// The invariants after quiescence.
    fn check(&mut self) -> Result<(), String> {
        self.report.incarnations = self
            .islands
            .iter()
            .map(|isl| isl.control.incarnation)
            .max()
            .unwrap_or(0);
        let total: i64 = self
            .islands
            .iter()
            .map(|isl| isl.engine.balances.iter().sum::<i64>())
            .sum();
        let want = self.cfg.initial_balance * (self.cfg.accounts * self.islands.len()) as i64;
        if total != want {
            return Err(format!("total balance {total}, want {want}"));
        }
        for (i, isl) in self.islands.iter().enumerate() {
            if !isl.engine.branches.is_empty() || isl.engine.locks.iter().any(|l| l.is_some()) {
                return Err(format!(
                    "island {i}: leftover branches or locks{}",
                    self.dump()
                ));
            }
            let (cv, pv) = (isl.coord.stats().violations, isl.part.stats().violations);
            if cv + pv != 0 {
                return Err(format!(
                    "island {i}: protocol violations coord {cv} part {pv}"
                ));
            }
            // What a crash now would recover must equal what is in memory.
            let re = Engine::rebuild(
                self.cfg.accounts,
                self.cfg.initial_balance,
                &isl.log.entries,
            );
            if re.balances != isl.engine.balances || re.applied != isl.engine.applied {
                return Err(format!("island {i}: memory differs from its durable log"));
            }
        }
        for (&g, t) in &self.txns {
            let decided = self.islands[t.home].log.entries[..self.islands[t.home].log.durable]
                .iter()
                .any(|e| {
                    e.rec
                        == LogRec::Decision {
                            gtid: g,
                            commit: true,
                        }
                });
            for &w in &t.writers {
                let applied = self.islands[w].engine.applied.contains(&g);
                if applied != decided {
                    return Err(format!(
                        "gtid {g:#x}: coordinator decision commit={decided}, island {w} applied={applied}"
                    ));
                }
            }
            match self.outcomes.get(&g) {
                Some(&c) if c != decided => {
                    return Err(format!(
                        "gtid {g:#x}: outcome committed={c} but decision commit={decided}"
                    ))
                }
                _ => {}
            }
            if decided {
                self.report.committed += 1;
            } else {
                self.report.aborted += 1;
            }
        }
        if let Some(g) = self.reused.first() {
            return Err(format!(
                "gtid {g:#x} was handed out twice ({} reused in all)",
                self.reused.len()
            ));
        }
        Ok(())
    }
}

impl Island {
    /// Opens the island (a new incarnation): as `Wal::open`, one durable control-file write
    /// bumps the incarnation and reserves the first chunk above the last reservation, and
    /// the drawer starts there.
    fn open(&mut self, cfg: &SimConfig) {
        self.control.incarnation += 1;
        self.reserving = None;
        if cfg.reserve_gtids {
            let start = self.control.reserved;
            self.control.reserved = start + cfg.gtid_chunk;
            self.draw = SeqDraw::new(start, cfg.gtid_chunk);
        } else {
            self.control.reserved = u64::MAX;
            self.draw = SeqDraw::new(1, cfg.gtid_chunk);
        }
    }
}

fn machine_config(cfg: &SimConfig, i: usize) -> Config {
    Config {
        island: i as IslandId,
        islands: cfg.islands,
        max_in_flight: cfg.max_in_flight,
        timeouts: cfg.timeouts,
    }
}
