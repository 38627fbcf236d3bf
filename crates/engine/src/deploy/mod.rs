//! Deployments: how many islands, which cores each, which sites each holds.
//!
//! A [`DeploySpec`] is what the user asks for (command line or TOML file); a
//! [`Plan`] is what it means on one [`Topology`]: per island, the pinned CPUs,
//! NUMA node, workers, sites, concurrency control, durability and log
//! directory. Planning is pure: nothing is started or pinned here, so plans are
//! tested on described machines (4×6, 8×10, 2×12 with SMT) as well as this one.

mod config;
mod placement;
mod sites;
#[cfg(test)]
mod tests;

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;

pub use sites::{partition_keys, EvenSplit, KeyPartition, SiteMap};

use crate::route::IslandId;
use crate::topology::{plural, CpuId, CpuSet, Topology, TopologyError};

/// Errors of deployment specs and plans. Each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeployError {
    #[error("bad islands label '{label}': {why}")]
    BadLabel { label: String, why: String },
    #[error("bad placement '{0}': use grouped, spread or os")]
    BadPlacement(String),
    #[error("a deployment needs at least 1 island")]
    NoIslands,
    #[error("{islands} islands asked for, but only {cores} cores are allowed (CPUs {cpus})")]
    TooManyIslands {
        islands: usize,
        cores: usize,
        cpus: String,
    },
    #[error("island {island}: {source}")]
    IslandCpus {
        island: usize,
        source: TopologyError,
    },
    #[error("island {island} has an empty CPU list")]
    EmptyIsland { island: usize },
    #[error("islands {a} and {b} overlap: both list CPUs {cpus}")]
    Overlap { a: usize, b: usize, cpus: String },
    #[error(
        "explicit CPU lists fix the placement: use placement grouped (pin them) or os (do not pin)"
    )]
    SpreadExplicit,
    #[error("{islands} islands: island ids are 16 bits, so a deployment has at most 65536")]
    TooManyIslandIds { islands: u32 },
    #[error("the data needs at least 1 site")]
    NoSites,
    #[error("{islands} islands but only {sites} sites: every island needs at least one site (raise --sites)")]
    MoreIslandsThanSites { islands: u32, sites: u32 },
    #[error("{keys} keys cannot fill {sites} sites: every site needs at least one key")]
    TooFewKeys { keys: u64, sites: u32 },
    #[error("workers per island must be at least 1")]
    ZeroWorkers,
    #[error("no CPU of this machine is allowed for this process")]
    NoAllowedCpus,
    #[error("{name} must not be empty")]
    EmptyName { name: &'static str },
    #[error("deployment file {path}: {why}")]
    Config { path: String, why: String },
    #[error("island {island}: its socket path {path} is {len} bytes, more than the {max} a Unix socket's path may hold (shorten run_dir, or give the island a shorter endpoint)")]
    SocketPathTooLong {
        island: usize,
        path: String,
        len: usize,
        max: usize,
    },
    #[error(transparent)]
    Topology(#[from] TopologyError),
}

impl From<DeployError> for crate::Error {
    fn from(e: DeployError) -> crate::Error {
        crate::Error::Config(e.to_string())
    }
}

/// How many islands, and of what unit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Islands {
    /// N islands of equal size (±1 core), each as compact as the placement
    /// allows. `Count(1)` is shared-everything: one island for all allowed cores.
    Count(u32),
    PerSocket,
    PerNuma,
    PerL3,
    PerCore,
    /// One CPU list per island, pinned exactly as given.
    Explicit(Vec<CpuSet>),
}

impl Islands {
    /// Parses a label as on the command line: `1`, `per-socket`, `per-numa`,
    /// `per-l3`, `per-core`, a number, or CPU lists `0-5;6-11` (a single list
    /// ends in `;` when it is one CPU: `3;`).
    pub fn parse(label: &str) -> Result<Islands, DeployError> {
        let bad = |why: String| DeployError::BadLabel {
            label: label.to_string(),
            why,
        };
        let l = label.trim();
        match l {
            "per-socket" | "socket" => return Ok(Islands::PerSocket),
            "per-numa" | "numa" => return Ok(Islands::PerNuma),
            "per-l3" | "l3" => return Ok(Islands::PerL3),
            "per-core" | "core" => return Ok(Islands::PerCore),
            "machine" | "shared-everything" => return Ok(Islands::Count(1)),
            "" => return Err(bad("empty label".to_string())),
            _ => {}
        }
        if l.bytes().all(|b| b.is_ascii_digit()) {
            return match l.parse::<u32>() {
                Ok(0) => Err(DeployError::NoIslands),
                Ok(n) => Ok(Islands::Count(n)),
                Err(_) => Err(bad("too many islands".to_string())),
            };
        }
        if l.strip_prefix('-')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(bad(
                "a negative number: the number of islands must be at least 1".to_string(),
            ));
        }
        if !l
            .bytes()
            .all(|b| b.is_ascii_digit() || b",-:; ".contains(&b))
        {
            return Err(bad(
                "use 1, per-socket, per-numa, per-l3, per-core, a number N, or CPU lists such as 0-5;6-11"
                    .to_string(),
            ));
        }
        let mut parts: Vec<&str> = l.split(';').collect();
        if parts.len() > 1 && parts.last().is_some_and(|p| p.trim().is_empty()) {
            parts.pop();
        }
        let mut lists = Vec::with_capacity(parts.len());
        for (island, part) in parts.iter().enumerate() {
            if part.trim().is_empty() {
                return Err(DeployError::EmptyIsland { island });
            }
            lists.push(
                CpuSet::parse(part).map_err(|source| DeployError::IslandCpus { island, source })?,
            );
        }
        Ok(Islands::Explicit(lists))
    }
}

impl fmt::Display for Islands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Islands::Count(n) => write!(f, "{n}"),
            Islands::PerSocket => f.write_str("per-socket"),
            Islands::PerNuma => f.write_str("per-numa"),
            Islands::PerL3 => f.write_str("per-l3"),
            Islands::PerCore => f.write_str("per-core"),
            Islands::Explicit(lists) => {
                let lists: Vec<String> = lists.iter().map(|l| l.to_string()).collect();
                f.write_str(&lists.join(";"))
            }
        }
    }
}

impl FromStr for Islands {
    type Err = DeployError;
    fn from_str(s: &str) -> Result<Islands, DeployError> {
        Islands::parse(s)
    }
}

/// How an island's threads map to cores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Topology-aware: an island's cores as close together as possible.
    #[default]
    Grouped,
    /// Deliberately round-robin across sockets (the paper's experiment).
    Spread,
    /// No pinning: the OS schedules the island's threads anywhere allowed.
    Os,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::Grouped => "grouped",
            Placement::Spread => "spread",
            Placement::Os => "os",
        }
    }
}

/// As its name (reports and experiment results write it).
impl serde::Serialize for Placement {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Placement {
    type Err = DeployError;
    fn from_str(s: &str) -> Result<Placement, DeployError> {
        match s.trim() {
            "grouped" => Ok(Placement::Grouped),
            "spread" => Ok(Placement::Spread),
            "os" | "none" => Ok(Placement::Os),
            other => Err(DeployError::BadPlacement(other.to_string())),
        }
    }
}

/// The default base of the per-island log directories.
pub const LOG_DIR_DEFAULT: &str = "islands-data";
/// The default durability mode.
pub const DURABILITY_DEFAULT: &str = "sync";

/// Which settings a deployment file gave itself. [`DeploySpec`] fills the
/// others with the deployment defaults (durability sync, log in islands-data),
/// but `islands bench` has its own (no log; a temporary log directory): a file
/// that does not name them must leave the command's default, as its help says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub durability: bool,
    pub log_dir: bool,
    /// Each `[[island]]` entry's `listen` address (its PostgreSQL address
    /// when islands run as processes), in island order; empty without entries.
    pub listen: Vec<Option<std::net::SocketAddr>>,
}

/// What the user asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeploySpec {
    pub islands: Islands,
    pub placement: Placement,
    /// `None`: one worker per core of the island.
    pub workers_per_island: Option<u32>,
    /// `None`: one site per core of the deployment, so the data stays the same
    /// size across deployments of one machine, as in the paper.
    pub sites: Option<u32>,
    /// `None`: `none` for a one-worker island, `occ` otherwise.
    pub cc: Option<String>,
    pub durability: String,
    /// Island `i` logs to `log_dir/island-<i>`.
    pub log_dir: PathBuf,
    /// Periodic checkpoints by log growth, in MiB (0: not by size); `None`:
    /// the command's default ([`crate::island::CheckpointPolicy`]).
    pub checkpoint_every_mb: Option<u64>,
    /// Periodic checkpoints by time (zero: not by time); `None`: the default.
    pub checkpoint_every: Option<std::time::Duration>,
    /// `None`: every island runs in one process.
    pub processes: Option<Processes>,
}

/// How the islands of a deployment run as processes of their own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Processes {
    /// The deployment's id: every island's control file and handshake carry it.
    pub id: u128,
    /// [`Kind::Uds`] or [`Kind::Shm`] (`Shm` also sets its rings up over a socket).
    pub transport: crate::transport::join::Kind,
    /// Where the deployment's secret comes from (never the command line,
    /// never the wire).
    pub secret: SecretSource,
    /// Each island's socket path; empty: `run_dir/island-K.sock`.
    pub endpoints: Vec<PathBuf>,
    /// Where sockets and shared-memory files go.
    pub run_dir: PathBuf,
}

/// The longest path a Unix socket's address holds, in bytes: `sun_path` is
/// 108 bytes on Linux (104 elsewhere), one of them the terminating NUL.
pub const SOCKET_PATH_MAX: usize = if cfg!(target_os = "linux") { 107 } else { 103 };

/// Where the secret of islands as processes comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SecretSource {
    /// A file readable by its owner only (`secret_file`).
    File(PathBuf),
    /// An environment variable of every island's process (`secret_env`).
    Env(String),
}

impl SecretSource {
    /// Reads and checks the secret.
    pub fn read(
        &self,
    ) -> Result<crate::transport::handshake::Secret, crate::transport::handshake::SecretError> {
        use crate::transport::handshake::Secret;
        match self {
            SecretSource::File(p) => Secret::from_file(p),
            SecretSource::Env(var) => Secret::from_env(var),
        }
    }
}

impl Processes {
    /// Checks that the socket path of each of the deployment's `islands`
    /// islands fits a Unix socket's address ([`SOCKET_PATH_MAX`]), so that
    /// a path too long is refused when the deployment is read, not when an
    /// island binds it.
    pub fn check_endpoints(&self, islands: usize) -> Result<(), DeployError> {
        for island in 0..islands {
            let path = self.endpoint(island);
            let len = path.as_os_str().len();
            if len > SOCKET_PATH_MAX {
                return Err(DeployError::SocketPathTooLong {
                    island,
                    path: path.display().to_string(),
                    len,
                    max: SOCKET_PATH_MAX,
                });
            }
        }
        Ok(())
    }

    /// The socket path of island `i`.
    pub fn endpoint(&self, i: usize) -> PathBuf {
        self.endpoints
            .get(i)
            .cloned()
            .unwrap_or_else(|| self.run_dir.join(format!("island-{i}.sock")))
    }
}

impl DeploySpec {
    pub fn new(islands: Islands) -> DeploySpec {
        DeploySpec {
            islands,
            placement: Placement::Grouped,
            workers_per_island: None,
            sites: None,
            cc: None,
            durability: DURABILITY_DEFAULT.to_string(),
            log_dir: PathBuf::from(LOG_DIR_DEFAULT),
            checkpoint_every_mb: None,
            checkpoint_every: None,
            processes: None,
        }
    }

    /// Parses a TOML deployment file's text (see [`config`](self) for the format).
    pub fn from_toml_str(text: &str) -> Result<DeploySpec, DeployError> {
        config::parse(text, "<text>")
    }

    /// Reads a TOML deployment file.
    pub fn from_toml_file(path: &Path) -> Result<DeploySpec, DeployError> {
        Ok(DeploySpec::from_toml_file_named(path)?.0)
    }

    /// Reads a TOML deployment file, and says which of the settings whose
    /// default differs between commands the file names itself.
    pub fn from_toml_file_named(path: &Path) -> Result<(DeploySpec, Named), DeployError> {
        let text = std::fs::read_to_string(path).map_err(|e| DeployError::Config {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        config::parse_named(&text, &path.display().to_string())
    }
}

/// One island of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IslandPlan {
    pub id: IslandId,
    /// The CPUs its threads are pinned to; `None` under `os` placement.
    pub cpus: Option<CpuSet>,
    /// The same CPUs in the order workers take them (see
    /// [`IslandPlan::worker_cpu`]); empty under `os` placement.
    pub worker_cpus: Vec<CpuId>,
    /// Physical cores it owns (under `os`: the cores it is meant to use).
    pub cores: usize,
    /// The NUMA node (kernel id) holding most of its CPUs: where its memory goes.
    pub numa_node: Option<u32>,
    /// Socket indices its CPUs lie on.
    pub sockets: Vec<usize>,
    pub workers: u32,
    pub sites: Range<u32>,
    pub cc: String,
    pub durability: String,
    pub log_dir: PathBuf,
}

impl IslandPlan {
    /// The CPU worker `worker` of this island is pinned to (workers past the
    /// island's CPUs wrap around them); `None` under `os` placement.
    pub fn worker_cpu(&self, worker: usize) -> Option<CpuId> {
        if self.worker_cpus.is_empty() {
            return None;
        }
        Some(self.worker_cpus[worker % self.worker_cpus.len()])
    }
}

/// A deployment on one topology: what would run where. Invariants: islands
/// are numbered 0..n in order; pinned CPU sets are disjoint, exist and are
/// allowed; the site ranges partition `0..sites`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    machine: String,
    machine_cores: usize,
    label: String,
    placement: Placement,
    explicit: bool,
    islands: Vec<IslandPlan>,
    site_map: SiteMap,
}

/// Per island: its pinned CPUs in worker order (`None`: not pinned) and its
/// core count.
type Layout = Vec<(Option<Vec<CpuId>>, usize)>;

/// Plans `spec` on `topology`: validates it and chooses every island's cores.
pub fn plan(topology: &Topology, spec: &DeploySpec) -> Result<Plan, DeployError> {
    if spec.workers_per_island == Some(0) {
        return Err(DeployError::ZeroWorkers);
    }
    if spec.sites == Some(0) {
        return Err(DeployError::NoSites);
    }
    if spec.cc.as_deref().is_some_and(|c| c.trim().is_empty()) {
        return Err(DeployError::EmptyName { name: "cc" });
    }
    if spec.durability.trim().is_empty() {
        return Err(DeployError::EmptyName { name: "durability" });
    }
    let allowed = topology.allowed_cores();
    if allowed.is_empty() {
        return Err(DeployError::NoAllowedCpus);
    }
    let layout: Layout = match &spec.islands {
        Islands::Explicit(lists) => explicit_layout(topology, lists, spec.placement)?,
        unit => {
            let domains = unit_domains(topology, unit, &allowed)?;
            let sizes: Vec<usize> = domains.iter().map(|d| d.len()).collect();
            let cores = match spec.placement {
                Placement::Grouped => domains,
                Placement::Spread => placement::spread(topology, &allowed, &sizes),
                Placement::Os => {
                    return finish(topology, spec, sizes.iter().map(|&n| (None, n)).collect());
                }
            };
            cores
                .iter()
                .map(|cs| {
                    let per_core: Vec<CpuSet> = cs
                        .iter()
                        .map(|&c| topology.allowed_cpus_of_core(c))
                        .collect();
                    (Some(worker_order(&per_core)), cs.len())
                })
                .collect()
        }
    };
    finish(topology, spec, layout)
}

/// The order in which workers take an island's CPUs, given the CPUs of each of
/// its cores in placement order: the first hardware thread of every core, then
/// the second of every core, and so on. So workers get cores of their own
/// before any shares one with an SMT sibling, and the first workers go where
/// the placement put the first cores: one socket after another under grouped,
/// a different socket each under spread (its cores are dealt round-robin).
fn worker_order(per_core: &[CpuSet]) -> Vec<CpuId> {
    let rounds = per_core.iter().map(CpuSet::len).max().unwrap_or(0);
    (0..rounds)
        .flat_map(|k| per_core.iter().filter_map(move |c| c.ids().get(k).copied()))
        .collect()
}

/// The grouped core sets of a unit label (also used for sizes under spread / os).
fn unit_domains(
    t: &Topology,
    unit: &Islands,
    allowed: &[usize],
) -> Result<Vec<Vec<usize>>, DeployError> {
    let keep = |cores: &[usize]| -> Vec<usize> {
        cores
            .iter()
            .copied()
            .filter(|c| allowed.contains(c))
            .collect()
    };
    let domains: Vec<Vec<usize>> = match unit {
        Islands::PerSocket => t.sockets().iter().map(|s| keep(&s.cores)).collect(),
        Islands::PerL3 => t.l3_domains().iter().map(|l| keep(&l.cores)).collect(),
        Islands::PerNuma => (0..t.numa_nodes().len())
            .map(|n| {
                let cores: Vec<usize> = t
                    .cores()
                    .iter()
                    .filter(|c| c.numa == n)
                    .map(|c| c.index)
                    .collect();
                keep(&cores)
            })
            .collect(),
        Islands::PerCore => allowed.iter().map(|&c| vec![c]).collect(),
        Islands::Count(n) => {
            let n = *n as usize;
            if n == 0 {
                return Err(DeployError::NoIslands);
            }
            if n > allowed.len() {
                return Err(DeployError::TooManyIslands {
                    islands: n,
                    cores: allowed.len(),
                    cpus: t.allowed_cpus().to_string(),
                });
            }
            let sizes = placement::even_sizes(allowed.len(), n);
            return Ok(placement::grouped(t, allowed, &sizes));
        }
        Islands::Explicit(_) => unreachable!("explicit lists are laid out by explicit_layout"),
    };
    Ok(domains.into_iter().filter(|d| !d.is_empty()).collect())
}

fn explicit_layout(
    t: &Topology,
    lists: &[CpuSet],
    placement: Placement,
) -> Result<Layout, DeployError> {
    if lists.is_empty() {
        return Err(DeployError::NoIslands);
    }
    if placement == Placement::Spread {
        return Err(DeployError::SpreadExplicit);
    }
    for (island, list) in lists.iter().enumerate() {
        if list.is_empty() {
            return Err(DeployError::EmptyIsland { island });
        }
        t.check_allowed(list)
            .map_err(|source| DeployError::IslandCpus { island, source })?;
    }
    for a in 0..lists.len() {
        for b in a + 1..lists.len() {
            let common = lists[a].intersection(&lists[b]);
            if !common.is_empty() {
                return Err(DeployError::Overlap {
                    a,
                    b,
                    cpus: common.to_string(),
                });
            }
        }
    }
    Ok(lists
        .iter()
        .map(|l| {
            let mut cores: Vec<usize> = l
                .iter()
                .filter_map(|c| t.core_of(c))
                .map(|c| c.index)
                .collect();
            cores.dedup();
            cores.sort_unstable();
            cores.dedup();
            // The listed CPUs of each core, cores in tree order.
            let per_core: Vec<CpuSet> = cores
                .iter()
                .map(|&c| t.cores()[c].cpus.intersection(l))
                .collect();
            let pinned = (placement == Placement::Grouped).then(|| worker_order(&per_core));
            (pinned, cores.len())
        })
        .collect())
}

fn finish(t: &Topology, spec: &DeploySpec, layout: Layout) -> Result<Plan, DeployError> {
    let n = layout.len();
    if n == 0 {
        return Err(DeployError::NoIslands);
    }
    if let Some(p) = &spec.processes {
        p.check_endpoints(n)?;
    }
    let cores_total: usize = layout.iter().map(|(_, c)| c).sum();
    let sites = spec.sites.unwrap_or(cores_total as u32);
    let site_map = SiteMap::new(sites, n as u32)?;
    let islands = layout
        .into_iter()
        .enumerate()
        .map(|(i, (order, cores))| {
            // `SiteMap::new` refused more islands than there are ids.
            let id = i as IslandId;
            let cpus = order
                .as_ref()
                .map(|o| o.iter().copied().collect::<CpuSet>());
            let workers = spec.workers_per_island.unwrap_or(cores.max(1) as u32);
            let (numa_node, sockets) = match &cpus {
                Some(set) => (majority_node(t, set), sockets_of(t, set)),
                None => (None, Vec::new()),
            };
            IslandPlan {
                id,
                cpus,
                worker_cpus: order.unwrap_or_default(),
                cores,
                numa_node,
                sockets,
                workers,
                sites: site_map.sites_of(id),
                cc: spec
                    .cc
                    .clone()
                    .unwrap_or_else(|| if workers == 1 { "none" } else { "occ" }.to_string()),
                durability: spec.durability.clone(),
                log_dir: spec.log_dir.join(format!("island-{i}")),
            }
        })
        .collect();
    Ok(Plan {
        machine: t.name().to_string(),
        machine_cores: t.allowed_cores().len(),
        label: spec.islands.to_string(),
        placement: spec.placement,
        explicit: matches!(spec.islands, Islands::Explicit(_)),
        islands,
        site_map,
    })
}

/// The node holding most of `set` (lowest id on ties).
fn majority_node(t: &Topology, set: &CpuSet) -> Option<u32> {
    let mut counts: Vec<(u32, usize)> = Vec::new();
    for cpu in set.iter() {
        let node = t.numa_node_of(cpu)?;
        match counts.iter_mut().find(|(n, _)| *n == node) {
            Some((_, k)) => *k += 1,
            None => counts.push((node, 1)),
        }
    }
    counts.sort_unstable();
    counts
        .iter()
        .max_by_key(|(n, k)| (*k, std::cmp::Reverse(*n)))
        .map(|(n, _)| *n)
}

fn sockets_of(t: &Topology, set: &CpuSet) -> Vec<usize> {
    let mut s: Vec<usize> = set.iter().filter_map(|c| t.socket_of(c)).collect();
    s.sort_unstable();
    s.dedup();
    s
}

impl Plan {
    pub fn islands(&self) -> &[IslandPlan] {
        &self.islands
    }

    pub fn island(&self, id: IslandId) -> &IslandPlan {
        &self.islands[usize::from(id)]
    }

    pub fn placement(&self) -> Placement {
        self.placement
    }

    pub fn site_map(&self) -> &SiteMap {
        &self.site_map
    }

    pub fn sites(&self) -> u32 {
        self.site_map.sites()
    }

    pub fn sites_of(&self, island: IslandId) -> Range<u32> {
        self.site_map.sites_of(island)
    }

    pub fn island_of_site(&self, site: u32) -> IslandId {
        self.site_map.island_of_site(site)
    }

    /// The name of the machine the plan is for.
    pub fn machine(&self) -> &str {
        &self.machine
    }

    /// How a picture of the machine shows this plan: its summary as the
    /// title, and each island's CPUs and legend line, in island order.
    pub fn marks(&self) -> crate::topology::Marks {
        let islands = self
            .islands()
            .iter()
            .map(|i| {
                let text = match &i.cpus {
                    Some(c) => format!(
                        "island {}: cpus {c}, {}, {} workers, sites {}-{}",
                        i.id,
                        plural(i.cores, "core"),
                        i.workers,
                        i.sites.start,
                        i.sites.end - 1
                    ),
                    None => format!(
                        "island {}: not pinned ({} intended), {} workers",
                        i.id,
                        plural(i.cores, "core"),
                        i.workers
                    ),
                };
                (i.cpus.clone(), text)
            })
            .collect();
        crate::topology::Marks {
            title: self.summary(),
            islands,
        }
    }

    /// One line: "4 islands on 4x6 (24 cores), grouped: no island crosses a socket".
    pub fn summary(&self) -> String {
        let n = self.islands.len();
        let label = if self.label == n.to_string() {
            String::new()
        } else {
            format!(" ({})", self.label)
        };
        let head = format!(
            "{}{label} on {} ({}), {}",
            plural(n, "island"),
            self.machine,
            plural(self.machine_cores, "allowed core"),
            if self.explicit && self.placement == Placement::Grouped {
                "explicit CPU lists".to_string()
            } else {
                self.placement.to_string()
            }
        );
        if self.placement == Placement::Os {
            let workers: u32 = self.islands.iter().map(|i| i.workers).sum();
            return format!("{head}: nothing pinned, the OS schedules {workers} workers");
        }
        let crossing = self.islands.iter().filter(|i| i.sockets.len() > 1).count();
        let tail = if crossing == 0 {
            "no island crosses a socket".to_string()
        } else if crossing == n {
            let max = self
                .islands
                .iter()
                .map(|i| i.sockets.len())
                .max()
                .unwrap_or(0);
            format!("every island spans several sockets (up to {max})")
        } else {
            format!("{} of {n} span several sockets", plural(crossing, "island"))
        };
        format!("{head}: {tail}")
    }

    /// A table, one row per island, then the summary line.
    pub fn render(&self) -> String {
        let header = [
            "island",
            "cpus",
            "cores",
            "node",
            "sockets",
            "workers",
            "sites",
            "cc",
            "durability",
            "log dir",
        ];
        let rows: Vec<[String; 10]> = self
            .islands
            .iter()
            .map(|i| {
                [
                    i.id.to_string(),
                    match &i.cpus {
                        Some(c) => c.to_string(),
                        None => "(not pinned)".to_string(),
                    },
                    i.cores.to_string(),
                    i.numa_node.map_or("-".to_string(), |n| n.to_string()),
                    if i.sockets.is_empty() {
                        "-".to_string()
                    } else {
                        i.sockets
                            .iter()
                            .map(|s| s.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                    i.workers.to_string(),
                    if i.sites.len() == 1 {
                        i.sites.start.to_string()
                    } else {
                        format!("{}-{} ({})", i.sites.start, i.sites.end - 1, i.sites.len())
                    },
                    i.cc.clone(),
                    i.durability.clone(),
                    i.log_dir.display().to_string(),
                ]
            })
            .collect();
        let mut width = header.map(str::len);
        for r in &rows {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[&str]| -> String {
            let mut s = String::new();
            for (k, cell) in cells.iter().enumerate() {
                if k + 1 == cells.len() {
                    s.push_str(cell);
                } else {
                    s.push_str(&format!("{cell:<w$}  ", w = width[k]));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        out.push_str(&line(&header));
        for r in &rows {
            let cells: Vec<&str> = r.iter().map(String::as_str).collect();
            out.push_str(&line(&cells));
        }
        out.push_str(&self.summary());
        out.push('\n');
        out
    }
}
