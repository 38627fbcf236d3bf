//! The dependency graph of a history of committed transactions, and the
//! check that it is acyclic.
//!
//! Each transaction is identified by a unique id, and every row it writes
//! carries that id, so a read names the version it saw. Every write replaces
//! a version the writer read (`prev`): an update or delete the row it read,
//! an insert the *absence* it found, named by the id of the delete that made
//! it (kept in a row the delete writes; 0 for a key absent from the start).
//! Following `prev` links from each key's initial version (id 0) gives the
//! key's version order; from it come the edges:
//!
//! - ww: the writer of a version precedes the writer of the next one;
//! - wr: the writer of a version precedes each reader of it;
//! - rw: a reader of a version precedes the writer of the next one (so a
//!   miss, a read of an absence, precedes the insert that filled it).
//!
//! Scans also observe what they do *not* return: a key in a scanned range
//! that is not returned was absent, a key not returned by a secondary scan
//! was absent or in another group. Such a negative observation names no
//! version. It is checked against the runs of consecutive versions that
//! would have been returned: the reader precedes the run's first writer or
//! follows its last (the writer that ended it). When a run never ended (or
//! was there from the start) that is an edge at once; otherwise it becomes
//! one when the graph already orders the reader after the run's start (then
//! it follows the end) or before the run's end (then it precedes the
//! start). Those inferences look only at transactions within
//! [`WINDOW`] commits of the reader: a bound on the work, which can only
//! miss a cycle, never invent one.
//!
//! A cycle means no serial order explains what the transactions saw. So
//! does a broken version chain (two writers replacing one version: a lost
//! update; a write replacing a version nobody committed), a read of a
//! version that is not in the key's history, or content that differs from
//! what the version's writer wrote: those are reported as violations.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Write as _;

/// A key: (table, primary key).
pub type Tk = (u16, u64);

/// A row's state as a version holds it: `Some(group)` if present.
pub type State = Option<u64>;

/// What a negative observation says the key was not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pred {
    /// Present (a range scan or an audit did not find the key).
    Present,
    /// Present in this group (a secondary scan did not return the key).
    Group(u64),
}

impl Pred {
    fn holds(self, s: State) -> bool {
        match self {
            Pred::Present => s.is_some(),
            Pred::Group(g) => s == Some(g),
        }
    }
}

/// A write: `tk` now holds the writer's version, which replaced `prev`.
#[derive(Clone, Debug)]
pub struct Write {
    pub tk: Tk,
    pub prev: u64,
    pub state: State,
}

/// One committed transaction, as it recorded itself.
#[derive(Clone, Debug, Default)]
pub struct Done {
    /// Its id: the version id of everything it wrote (never 0).
    pub id: u64,
    /// Order in which commits were recorded (bounds the inference).
    pub seq: u64,
    /// What it ran, for reports.
    pub plan: String,
    /// Versions it read: key, version id, and the state it saw.
    pub reads: Vec<(Tk, u64, State)>,
    /// Keys it saw not satisfying a predicate.
    pub negs: Vec<(Tk, Pred)>,
    pub writes: Vec<Write>,
    /// Inconsistencies it noticed itself (e.g. a scan row of another group).
    pub anomalies: Vec<String>,
}

/// How far (in commits) inference looks from a reader.
pub const WINDOW: u64 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ww,
    Wr,
    Rw,
    /// From a negative observation: the reader saw the key outside a run
    /// of versions from `start` (the initial version if `None`) to `end`
    /// (never ended if `None`). `via`: the edge follows from the graph
    /// ordering this transaction (the run's start or end) and the reader.
    Neg {
        start: Option<usize>,
        end: Option<usize>,
        via: Option<usize>,
    },
}

struct Version {
    id: u64,
    state: State,
    /// Index of the writing transaction (`None`: the initial version).
    writer: Option<usize>,
}

/// What the check found.
#[derive(Debug, Default)]
pub struct Report {
    pub transactions: usize,
    pub versions: usize,
    pub edges: usize,
    /// Edges inferred from negative observations.
    pub inferred: usize,
    /// Strongly connected components with more than one transaction.
    pub cycles: usize,
    /// The same, from version edges alone (ww, wr, rw: no inference).
    pub explicit_cycles: usize,
    /// A description of the first few cycles, with their transactions.
    pub cycle_reports: Vec<String>,
    /// Violations that are not cycles.
    pub violations: Vec<String>,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.cycles == 0 && self.violations.is_empty()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} transactions, {} versions, {} edges ({} inferred from scans), {} cycles \
             ({} from version edges alone), {} violations",
            self.transactions,
            self.versions,
            self.edges,
            self.inferred,
            self.cycles,
            self.explicit_cycles,
            self.violations.len()
        )
    }
}

struct Graph<'a> {
    done: &'a [Done],
    out: Vec<Vec<(usize, Kind, Tk)>>,
    inc: Vec<Vec<usize>>,
    set: HashSet<(usize, usize)>,
    edges: usize,
    /// Explain mode: look for the first edge added that closes a cycle.
    explain: bool,
    /// That edge, described with the cycle it closes.
    first: Option<String>,
}

impl Graph<'_> {
    fn add(&mut self, from: usize, to: usize, kind: Kind, tk: Tk) -> bool {
        if from == to || !self.set.insert((from, to)) {
            return false;
        }
        if self.explain && self.first.is_none() {
            let back = path(self, to, from, None, None);
            if !back.is_empty() {
                let mut cycle = vec![(from, kind, tk)];
                cycle.extend(back);
                self.first = Some(describe(self, &cycle));
            }
        }
        self.out[from].push((to, kind, tk));
        self.inc[to].push(from);
        self.edges += 1;
        true
    }

    /// Transactions reachable from `start` along edges (`forward`) or
    /// against them, within [`WINDOW`] commits of it.
    fn reach(&self, start: usize, forward: bool) -> HashSet<usize> {
        let s0 = self.done[start].seq;
        let mut seen = HashSet::new();
        let mut q = VecDeque::from([start]);
        while let Some(n) = q.pop_front() {
            let next: Box<dyn Iterator<Item = usize>> = if forward {
                Box::new(self.out[n].iter().map(|e| e.0))
            } else {
                Box::new(self.inc[n].iter().copied())
            };
            for m in next {
                if self.done[m].seq.abs_diff(s0) <= WINDOW && seen.insert(m) {
                    q.push_back(m);
                }
            }
        }
        seen
    }
}

/// Checks a history: `initial` is each key's state before the run (keys
/// not listed were absent), `done` the committed transactions.
pub fn check(initial: &HashMap<Tk, State>, done: &[Done]) -> Report {
    let (g, inferred, violations) = build(initial, done, false);
    let sccs = cyclic_components(&g.out);
    let explicit: Vec<Vec<(usize, Kind, Tk)>> = g
        .out
        .iter()
        .map(|es| {
            es.iter()
                .filter(|e| !matches!(e.1, Kind::Neg { .. }))
                .copied()
                .collect()
        })
        .collect();
    let mut cycle_reports = Vec::new();
    if !sccs.is_empty() {
        // Build it again, stopping at the first edge that closes a cycle:
        // the observation that no serial order explains.
        let (again, _, _) = build(initial, done, true);
        cycle_reports.extend(
            again
                .first
                .map(|f| format!("the first edge to close a cycle: {f}")),
        );
        cycle_reports.extend(sccs.iter().take(2).map(|c| describe_component(&g, c)));
    }
    Report {
        transactions: done.len(),
        versions: violations.1,
        edges: g.edges,
        inferred,
        cycles: sccs.len(),
        explicit_cycles: cyclic_components(&explicit).len(),
        cycle_reports,
        violations: violations.0,
    }
}

/// The graph of a history, the number of edges inferred from negative
/// observations, and (violations, versions).
fn build<'a>(
    initial: &HashMap<Tk, State>,
    done: &'a [Done],
    explain: bool,
) -> (Graph<'a>, usize, (Vec<String>, usize)) {
    let mut problems = Vec::new();
    let versions = chains(initial, done, &mut problems);
    let mut pos: HashMap<(Tk, u64), usize> = HashMap::new();
    for (tk, chain) in &versions {
        for (i, v) in chain.iter().enumerate() {
            pos.insert((*tk, v.id), i);
        }
    }
    let mut g = Graph {
        done,
        out: vec![Vec::new(); done.len()],
        inc: vec![Vec::new(); done.len()],
        set: HashSet::new(),
        edges: 0,
        explain,
        first: None,
    };
    for (tk, chain) in &versions {
        for w in chain.windows(2) {
            if let (Some(a), Some(b)) = (w[0].writer, w[1].writer) {
                g.add(a, b, Kind::Ww, *tk);
            }
        }
    }
    for (i, d) in done.iter().enumerate() {
        for &(tk, id, state) in &d.reads {
            let Some(&p) = pos.get(&(tk, id)) else {
                problems.push(format!(
                    "txn {:#x} read version {id:#x} of {tk:?}, which no committed transaction \
                     wrote there",
                    d.id
                ));
                continue;
            };
            let chain = &versions[&tk];
            if chain[p].state != state {
                problems.push(format!(
                    "txn {:#x} read version {id:#x} of {tk:?} as {state:?}, but its writer left \
                     {:?}",
                    d.id, chain[p].state
                ));
            }
            if let Some(w) = chain[p].writer {
                g.add(w, i, Kind::Wr, tk);
            }
            if let Some(next) = chain.get(p + 1).and_then(|v| v.writer) {
                g.add(i, next, Kind::Rw, tk);
            }
        }
        for a in &d.anomalies {
            problems.push(format!("txn {:#x}: {a}", d.id));
        }
    }
    // Negative observations: the runs of versions that would have been seen.
    let mut open: Vec<(usize, usize, usize, Tk)> = Vec::new(); // (reader, start writer, end writer)
    let mut inferred = 0;
    for (i, d) in done.iter().enumerate() {
        for &(tk, pred) in &d.negs {
            let chain = versions.get(&tk).map(Vec::as_slice).unwrap_or(&[]);
            let mut j = 0;
            while j < chain.len() {
                if !pred.holds(chain[j].state) {
                    j += 1;
                    continue;
                }
                let start = j;
                while j < chain.len() && pred.holds(chain[j].state) {
                    j += 1;
                }
                let (w0, w1) = (chain[start].writer, chain.get(j).and_then(|v| v.writer));
                if w0 == Some(i) || w1 == Some(i) {
                    continue;
                }
                match (w0, w1) {
                    (None, None) => problems.push(format!(
                        "txn {:#x} saw {tk:?} not {pred:?}, which it was in every version",
                        d.id
                    )),
                    (Some(w), None) => {
                        let why = Kind::Neg {
                            start: w0,
                            end: None,
                            via: None,
                        };
                        inferred += g.add(i, w, why, tk) as usize
                    }
                    (None, Some(w)) => {
                        let why = Kind::Neg {
                            start: None,
                            end: w1,
                            via: None,
                        };
                        inferred += g.add(w, i, why, tk) as usize
                    }
                    (Some(a), Some(b)) => open.push((i, a, b, tk)),
                }
            }
        }
    }
    // Resolve the undecided ones from what the graph already orders, until
    // nothing more follows (a few rounds at most).
    for _round in 0..2 {
        let mut added = 0;
        let mut by_reader: HashMap<usize, Vec<(usize, usize, Tk)>> = HashMap::new();
        for &(r, a, b, tk) in &open {
            by_reader.entry(r).or_default().push((a, b, tk));
        }
        let mut still = Vec::new();
        for (r, runs) in by_reader {
            let before = g.reach(r, false);
            let after = g.reach(r, true);
            for (a, b, tk) in runs {
                let why = |via| Kind::Neg {
                    start: Some(a),
                    end: Some(b),
                    via: Some(via),
                };
                if before.contains(&a) {
                    added += g.add(b, r, why(a), tk) as usize;
                } else if after.contains(&b) {
                    added += g.add(r, a, why(b), tk) as usize;
                } else {
                    still.push((r, a, b, tk));
                }
            }
        }
        inferred += added;
        open = still;
        if added == 0 {
            break;
        }
    }
    let n_versions = versions.values().map(Vec::len).sum();
    (g, inferred, (problems, n_versions))
}

/// Each key's versions in order, from the writes' `prev` links.
fn chains(
    initial: &HashMap<Tk, State>,
    done: &[Done],
    problems: &mut Vec<String>,
) -> HashMap<Tk, Vec<Version>> {
    let mut next: HashMap<(Tk, u64), (usize, State)> = HashMap::new();
    let mut keys: HashSet<Tk> = initial.keys().copied().collect();
    for (i, d) in done.iter().enumerate() {
        for w in &d.writes {
            keys.insert(w.tk);
            if let Some((j, _)) = next.insert((w.tk, w.prev), (i, w.state)) {
                problems.push(format!(
                    "txns {:#x} and {:#x} both replaced version {:#x} of {:?} (a lost update)",
                    done[j].id, d.id, w.prev, w.tk
                ));
            }
        }
    }
    let mut out = HashMap::new();
    for tk in keys {
        let mut chain = vec![Version {
            id: 0,
            state: initial.get(&tk).copied().flatten(),
            writer: None,
        }];
        while let Some((i, state)) = next.remove(&(tk, chain[chain.len() - 1].id)) {
            chain.push(Version {
                id: done[i].id,
                state,
                writer: Some(i),
            });
        }
        out.insert(tk, chain);
    }
    for ((tk, prev), (i, _)) in next {
        problems.push(format!(
            "txn {:#x} replaced version {prev:#x} of {tk:?}, which is not in the key's committed \
             history",
            done[i].id
        ));
    }
    out
}

/// The strongly connected components of more than one node (Tarjan's
/// algorithm, iterative: histories are long).
fn cyclic_components(out: &[Vec<(usize, Kind, Tk)>]) -> Vec<Vec<usize>> {
    let n = out.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut found = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut ei)) = work.last_mut() {
            if *ei == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&(w, _, _)) = out[v].get(*ei) {
                *ei += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut c = Vec::new();
                loop {
                    let w = stack.pop().expect("on the stack");
                    on_stack[w] = false;
                    c.push(w);
                    if w == v {
                        break;
                    }
                }
                if c.len() > 1 {
                    found.push(c);
                }
            }
        }
    }
    found
}

/// A shortest path from `from` to `to` (all of it, if `within` is given,
/// inside that set; not through the edge `without`), as (transaction,
/// edge to the next) pairs.
fn path(
    g: &Graph,
    from: usize,
    to: usize,
    within: Option<&HashSet<usize>>,
    without: Option<(usize, usize)>,
) -> Vec<(usize, Kind, Tk)> {
    let mut prev: HashMap<usize, (usize, Kind, Tk)> = HashMap::new();
    let mut q = VecDeque::from([from]);
    let mut last = None;
    'bfs: while let Some(n) = q.pop_front() {
        for &(m, kind, tk) in &g.out[n] {
            if within.is_some_and(|w| !w.contains(&m)) || without == Some((n, m)) {
                continue;
            }
            if m == to {
                last = Some((n, kind, tk));
                break 'bfs;
            }
            if m != from {
                if let std::collections::hash_map::Entry::Vacant(e) = prev.entry(m) {
                    e.insert((n, kind, tk));
                    q.push_back(m);
                }
            }
        }
    }
    let mut out = Vec::new();
    if let Some((mut n, kind, tk)) = last {
        out.push((n, kind, tk));
        while n != from {
            let (p, k, t) = prev[&n];
            out.push((p, k, t));
            n = p;
        }
    }
    out.reverse();
    out
}

/// An edge for a report, with transaction ids.
fn edge(g: &Graph, kind: Kind, tk: Tk) -> String {
    let id = |i: Option<usize>| i.map_or("initial".to_string(), |i| format!("{:#x}", g.done[i].id));
    match kind {
        Kind::Neg { start, end, via } => format!(
            "saw {tk:?} outside its versions from {} to {}{}",
            id(start),
            end.map_or("the end".to_string(), |e| id(Some(e))),
            via.map_or(String::new(), |v| format!(
                " (ordered through {})",
                id(Some(v))
            ))
        ),
        k => format!("{k:?} on {tk:?}"),
    }
}

/// A shortest cycle through the component's first transaction.
fn describe_component(g: &Graph, comp: &[usize]) -> String {
    let inside: HashSet<usize> = comp.iter().copied().collect();
    let cycle = path(g, comp[0], comp[0], Some(&inside), None);
    format!(
        "a cycle among {} transactions: {}",
        comp.len(),
        describe(g, &cycle)
    )
}

/// A cycle given as (transaction, edge to the next) pairs: each
/// transaction's record and the edge to the next; for an edge inferred from
/// the graph, the path it was inferred from.
fn describe(g: &Graph, cycle: &[(usize, Kind, Tk)]) -> String {
    let mut s = format!("{} transactions\n", cycle.len());
    for (i, &(n, kind, tk)) in cycle.iter().enumerate() {
        let d = &g.done[n];
        let _ = writeln!(
            s,
            "  txn {:#x} (commit #{}) {}\n    reads {:?}\n    not {:?}\n    writes {:?}\n    --{}-->",
            d.id,
            d.seq,
            d.plan,
            d.reads,
            d.negs,
            d.writes
                .iter()
                .map(|w| (w.tk, w.prev, w.state))
                .collect::<Vec<_>>(),
            edge(g, kind, tk)
        );
        if let Kind::Neg {
            start: Some(a),
            via: Some(v),
            ..
        } = kind
        {
            // Run start `a` preceded the reader (the edge's target), or the
            // reader (this transaction) preceded the run's end `v`.
            let target = cycle[(i + 1) % cycle.len()].0;
            let (from, to) = if v == a { (a, target) } else { (n, v) };
            let why: Vec<String> = path(g, from, to, None, Some((n, target)))
                .into_iter()
                .map(|(m, k, t)| format!("{:#x} --{}-->", g.done[m].id, edge(g, k, t)))
                .collect();
            let _ = writeln!(s, "      because {} {:#x}", why.join(" "), g.done[to].id);
        }
    }
    s
}

/// Checks that the rows left after a run (`left`: version id and state of
/// each present row) are each key's last committed version.
pub fn check_final(
    done: &[Done],
    initial: &HashMap<Tk, State>,
    left: &HashMap<Tk, (u64, State)>,
) -> Vec<String> {
    let mut problems = Vec::new();
    let versions = chains(initial, done, &mut Vec::new());
    for (tk, chain) in &versions {
        let last = &chain[chain.len() - 1];
        let want = last.state.map(|s| (last.id, Some(s)));
        let got = left.get(tk).copied();
        if got != want {
            problems.push(format!(
                "{tk:?} holds {got:?} after the run; its last committed version is {want:?}"
            ));
        }
    }
    for tk in left.keys() {
        if !versions.contains_key(tk) {
            problems.push(format!(
                "{tk:?} is present, but no committed transaction wrote it"
            ));
        }
    }
    problems
}
