//! Which transport joins the islands of a deployment ([`Kind`]), and the
//! joining of every island of one deployment inside one process
//! ([`in_process`]): each island gets the transport a process of its own
//! would have (a [`Uds`] or a [`Shm`] whose [`Layout::me`] is that island),
//! so that a benchmark measures the transport's whole path with the islands
//! still sharing one process.

use super::handshake::{build_id, Hello, Secret, WIRE_VERSION};
use super::layout::Layout;
use super::peer::{PeerState, PeerStats};
use super::shm::{Shm, ShmConfig};
use super::uds::{Uds, UdsConfig};
use super::{InProc, Transport};
use crate::route::IslandId;
use crate::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How islands exchange batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Kind {
    /// Bounded in-process queues: islands of one process, nothing encoded.
    #[default]
    InProc,
    /// Single-producer/single-consumer rings in shared memory, one per
    /// direction per pair of islands, and a futex bell per endpoint.
    Shm,
    /// Unix domain sockets with I/O threads, after an authenticated handshake.
    Uds,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::InProc, Kind::Shm, Kind::Uds];

    pub fn name(self) -> &'static str {
        match self {
            Kind::InProc => "inproc",
            Kind::Shm => "shm",
            Kind::Uds => "uds",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| format!("unknown transport '{s}' (inproc, shm or uds)"))
    }
}

/// What the islands of a deployment say about themselves in a handshake,
/// besides their number.
#[derive(Clone, Debug)]
pub struct Identity {
    pub deployment: u128,
    /// Per island.
    pub incarnations: Vec<u64>,
    pub schema: u64,
    pub catalog: u64,
}

impl Identity {
    /// The hello of island `me` of a deployment whose islands have `workers`,
    /// over `uds` (a `shm` deployment's is marked so by [`for_process_with`]).
    pub fn hello(&self, me: IslandId, workers: &[u32]) -> Hello {
        Hello {
            wire_version: WIRE_VERSION,
            transport: Kind::Uds,
            build_id: build_id(),
            deployment: self.deployment,
            island: me,
            incarnation: self.incarnations.get(usize::from(me)).copied().unwrap_or(0),
            schema: self.schema,
            catalog: self.catalog,
            workers: workers.to_vec(),
        }
    }
}

/// The transports of every island of one deployment in this process:
/// `transports[i]` serves island `i`'s endpoints. Sockets and shared-memory
/// files live in a private temporary directory, removed when this is dropped
/// (after the transports).
pub struct Joined {
    pub kind: Kind,
    pub transports: Vec<Arc<dyn Transport>>,
    uds: Vec<Arc<Uds>>,
    shm: Vec<Arc<Shm>>,
    dir: Option<tempfile::TempDir>,
}

impl Joined {
    /// Each connection's figures, island by island (empty for `inproc`).
    pub fn peers(&self) -> Vec<(IslandId, Vec<PeerStats>)> {
        let uds = self.uds.iter().map(|u| (u.layout().me(), u.peers()));
        let shm = self.shm.iter().map(|s| (s.layout().me(), s.peers()));
        uds.chain(shm).collect()
    }

    /// Stops the transports' I/O threads.
    pub fn shutdown(&self) {
        for u in &self.uds {
            u.shutdown();
        }
    }
}

impl Drop for Joined {
    fn drop(&mut self) {
        self.shutdown();
        self.transports.clear();
        self.uds.clear();
        self.shm.clear();
        drop(self.dir.take());
    }
}

/// Joins islands with `workers[i]` workers each by `kind` inside this
/// process, and returns once every pair is connected (or after `wait`, with
/// an error naming the pairs that are not). `mailbox_depth`: batches each
/// endpoint's mailbox holds.
pub fn in_process(
    kind: Kind,
    workers: &[u32],
    id: &Identity,
    mailbox_depth: usize,
    wait: Duration,
) -> Result<Joined, Error> {
    let n = workers.len();
    if n == 0 || n > usize::from(IslandId::MAX) {
        return Err(Error::Config(format!("cannot join {n} islands")));
    }
    let mut joined = Joined {
        kind,
        transports: Vec::with_capacity(n),
        uds: Vec::new(),
        shm: Vec::new(),
        dir: None,
    };
    let io =
        |what: &str, e: &dyn std::fmt::Display| Error::Io(format!("{kind} transport: {what}: {e}"));
    if kind == Kind::InProc {
        let total: u32 = workers.iter().sum();
        let t: Arc<dyn Transport> = Arc::new(InProc::new(total as usize, mailbox_depth));
        joined.transports = vec![t; n];
        return Ok(joined);
    }
    let dir = tempfile::Builder::new()
        .prefix("islands-join-")
        .tempdir()
        .map_err(|e| io("a temporary directory", &e))?;
    match kind {
        Kind::InProc => unreachable!("returned above"),
        Kind::Uds => {
            let paths: Vec<_> = (0..n)
                .map(|i| dir.path().join(format!("island-{i}.sock")))
                .collect();
            // Known to this process only: nobody else may join its islands.
            let secret = Secret::random();
            for me in 0..n as IslandId {
                let mut cfg = UdsConfig::new(
                    Layout::new(workers, me),
                    paths.clone(),
                    secret.clone(),
                    id.hello(me, workers),
                );
                cfg.mailbox_depth = mailbox_depth;
                let u = Arc::new(Uds::new(cfg).map_err(|e| io("listen", &e))?);
                joined.transports.push(Arc::clone(&u) as Arc<dyn Transport>);
                joined.uds.push(u);
            }
        }
        Kind::Shm => {
            let mut cfg = ShmConfig::new(id.deployment);
            cfg.dir = dir.path().to_path_buf();
            cfg.mailbox_depth = mailbox_depth;
            cfg.wait = wait;
            // Each island waits for its peers' files: open them all at once.
            let handles: Vec<_> = (0..n as IslandId)
                .map(|me| {
                    let (cfg, layout) = (cfg.clone(), Layout::new(workers, me));
                    std::thread::spawn(move || Shm::open(layout, &cfg))
                })
                .collect();
            for h in handles {
                let s = h
                    .join()
                    .map_err(|_| Error::Config("opening a shm island panicked".into()))?
                    .map_err(|e| io("open", &e))?;
                let s = Arc::new(s);
                joined.transports.push(Arc::clone(&s) as Arc<dyn Transport>);
                joined.shm.push(s);
            }
        }
    }
    joined.dir = Some(dir);
    let end = Instant::now() + wait;
    loop {
        let down: Vec<String> = joined
            .peers()
            .into_iter()
            .flat_map(|(me, peers)| {
                peers
                    .into_iter()
                    .filter(move |p| p.island != me && p.state != PeerState::Up)
                    .filter(move |p| {
                        workers[usize::from(p.island)] > 0 && workers[usize::from(me)] > 0
                    })
                    .map(move |p| format!("{me}->{} {:?}", p.island, p.state))
            })
            .collect();
        if down.is_empty() {
            return Ok(joined);
        }
        if Instant::now() >= end {
            return Err(Error::Io(format!(
                "{kind} transport: islands not connected after {wait:?}: {}",
                down.join(", ")
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The transport of an island run as a process of its own
/// ([`for_process`]).
#[derive(Clone)]
pub enum Linked {
    Uds(Arc<Uds>),
    Shm(Arc<Shm>),
}

impl Linked {
    pub fn transport(&self) -> Arc<dyn Transport> {
        match self {
            Linked::Uds(u) => Arc::clone(u) as Arc<dyn Transport>,
            Linked::Shm(s) => Arc::clone(s) as Arc<dyn Transport>,
        }
    }

    /// Each peer island's connection.
    pub fn peers(&self) -> Vec<PeerStats> {
        match self {
            Linked::Uds(u) => u.peers(),
            Linked::Shm(s) => s.peers(),
        }
    }

    /// Closes the connections (see [`Uds::shutdown`], [`Shm::shutdown`]).
    pub fn shutdown(&self) {
        match self {
            Linked::Uds(u) => u.shutdown(),
            Linked::Shm(s) => s.shutdown(),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Linked::Uds(_) => Kind::Uds,
            Linked::Shm(_) => Kind::Shm,
        }
    }
}

/// Bytes of each ring between two island processes joined by `shm`.
pub const PROCESS_RING_BYTES: usize = 1 << 22;

/// The transport of island `me` run as a process of its own, as the
/// deployment file's `processes` settings describe it: a [`Uds`] listening on
/// its endpoint and connecting to its peers' (a peer not up yet is dialed
/// again with a backoff, so processes start in any order). `hello` is what it
/// says of itself in each handshake. With `transport = "shm"`, the same
/// connections set up a pair of shared-memory rings with each peer, which
/// carry the batches ([`Shm::for_process`]).
pub fn for_process(
    p: &crate::deploy::Processes,
    workers: &[u32],
    hello: Hello,
    mailbox_depth: usize,
) -> Result<Linked, Error> {
    for_process_with(p, workers, hello, mailbox_depth, None)
}

/// [`for_process`], with a peer counted down once nothing (not even a
/// heartbeat) came from it for `dead_after` (`None`: the [`UdsConfig`]
/// default).
pub fn for_process_with(
    p: &crate::deploy::Processes,
    workers: &[u32],
    mut hello: Hello,
    mailbox_depth: usize,
    dead_after: Option<Duration>,
) -> Result<Linked, Error> {
    // Peers must run the deployment file's transport: the handshake says it.
    hello.transport = p.transport;
    let me = hello.island;
    if usize::from(me) >= workers.len() {
        return Err(Error::Config(format!(
            "island {me}: the deployment has {} islands",
            workers.len()
        )));
    }
    if !p.endpoints.is_empty() && p.endpoints.len() != workers.len() {
        return Err(Error::Config(format!(
            "the deployment file names {} endpoints for {} islands",
            p.endpoints.len(),
            workers.len()
        )));
    }
    match p.transport {
        Kind::Uds | Kind::Shm => {}
        Kind::InProc => {
            return Err(Error::Config(
                "transport = \"inproc\" joins islands of one process only".into(),
            ))
        }
    }
    let secret = p.secret.read().map_err(|e| Error::Config(e.to_string()))?;
    let paths: Vec<_> = (0..workers.len()).map(|i| p.endpoint(i)).collect();
    if let Some(dir) = paths[usize::from(me)].parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Io(format!("cannot create {}: {e}", dir.display())))?;
    }
    let deployment = hello.deployment;
    let mut cfg = UdsConfig::new(Layout::new(workers, me), paths, secret, hello);
    cfg.mailbox_depth = mailbox_depth;
    if let Some(d) = dead_after {
        cfg.dead_after = d;
    }
    let listen = |e: &dyn std::fmt::Display| {
        Error::Io(format!(
            "island {me}: cannot listen on {}: {e}",
            p.endpoint(usize::from(me)).display()
        ))
    };
    if p.transport == Kind::Shm {
        let s = Shm::for_process(cfg, deployment, PROCESS_RING_BYTES, mailbox_depth)
            .map_err(|e| listen(&e))?;
        return Ok(Linked::Shm(s));
    }
    let u = Uds::new(cfg).map_err(|e| listen(&e))?;
    Ok(Linked::Uds(Arc::new(u)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{Endpoint, Outbox};

    fn id(n: usize) -> Identity {
        Identity {
            deployment: 7,
            incarnations: vec![1; n],
            schema: 3,
            catalog: 4,
        }
    }

    #[test]
    fn every_kind_carries_a_batch_between_every_pair_of_three_islands() {
        let workers = [2u32, 1, 2];
        for kind in Kind::ALL {
            let j = in_process(kind, &workers, &id(3), 64, Duration::from_secs(20)).unwrap();
            let layout = Layout::new(&workers, 0);
            for from in 0..5u32 {
                for to in 0..5u32 {
                    let isl = |e: u32| usize::from(layout.island_of(Endpoint(e)).unwrap());
                    let (fi, ti) = (isl(from), isl(to));
                    let (ft, tt) = (&j.transports[fi], &j.transports[ti]);
                    let mut out = Outbox::new(ft.endpoints());
                    super::super::push_frame(
                        out.batch(&**ft, Endpoint(to)),
                        &[from as u8, to as u8],
                    );
                    assert_eq!(out.flush(&**ft, Endpoint(from)), 0, "{kind}: refused");
                    let end = Instant::now() + Duration::from_secs(10);
                    let (who, batch) = loop {
                        if let Some(got) = tt.recv(Endpoint(to)) {
                            break got;
                        }
                        assert!(Instant::now() < end, "{kind}: {from}->{to} never arrived");
                        std::thread::yield_now();
                    };
                    assert_eq!(who, Endpoint(from), "{kind}");
                    let frames: Vec<&[u8]> =
                        super::super::frames(&batch).map(|f| f.unwrap()).collect();
                    assert_eq!(frames, vec![&[from as u8, to as u8][..]], "{kind}");
                }
            }
        }
    }

    #[test]
    fn a_kind_is_named_and_parsed() {
        for k in Kind::ALL {
            assert_eq!(k.name().parse::<Kind>().unwrap(), k);
        }
        assert!("tcp"
            .parse::<Kind>()
            .unwrap_err()
            .contains("inproc, shm or uds"));
    }
}
