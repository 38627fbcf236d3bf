//! The machine as a tree: machine → sockets (packages) → NUMA nodes → L3
//! domains → cores → hardware threads (CPU ids).
//!
//! A [`Topology`] comes from one of two places, through the same builder:
//! - [`Topology::discover`] reads `/sys` (no C library, no hwloc), and marks the
//!   CPUs this process may not use (`taskset`, cgroup cpusets) as not allowed;
//! - [`Topology::described`] builds a machine from a spec such as `4x6` or
//!   `sockets=2,l3=1,cores=12,threads=2`, for plans, tests and simulation.
//!
//! Sockets, NUMA nodes, L3 domains and cores are numbered densely (0, 1, …) in
//! tree order; CPU ids and NUMA node ids are the operating system's, because
//! `taskset` and `numactl` speak those. [`CostClass`] orders the cost of
//! communication between two CPUs, which is what placement minimises.

mod affinity;
mod cpulist;
mod described;
pub mod memory;
mod render;
pub use render::Marks;
mod sysfs;

use std::collections::BTreeMap;
use std::fmt;

pub use affinity::{allowed_cpus, pin_to};
pub use cpulist::{CpuId, CpuSet, CPU_ID_MAX};

/// Errors of topology discovery, described-topology specs and CPU lists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    #[error("bad CPU list '{list}': item '{part}': {why}")]
    BadCpuList {
        list: String,
        part: String,
        why: String,
    },
    #[error("bad topology spec '{spec}': '{part}': {why}")]
    BadSpec {
        spec: String,
        part: String,
        why: String,
    },
    #[error("CPU {cpu} does not exist on machine {machine} (its CPUs are {cpus})")]
    NoSuchCpu {
        cpu: CpuId,
        machine: String,
        cpus: String,
    },
    #[error("CPU {cpu} is not allowed for this process (allowed CPUs: {allowed}; see taskset / cgroup cpuset)")]
    CpuNotAllowed { cpu: CpuId, allowed: String },
    #[error("cannot read the topology from {path}: {why}")]
    Sysfs { path: String, why: String },
    #[error("the topology has no CPUs")]
    Empty,
}

impl From<TopologyError> for crate::Error {
    fn from(e: TopologyError) -> crate::Error {
        crate::Error::Config(e.to_string())
    }
}

/// How expensive communication between two CPUs is, cheapest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CostClass {
    /// The same physical core (SMT siblings, or the CPU itself): shared L1/L2.
    SameCore,
    /// Different cores sharing a last-level (L3) cache.
    SameL3,
    /// The same socket, different L3 domains: on-chip interconnect.
    SameSocket,
    /// Different sockets: the inter-socket link (QPI/UPI, Infinity Fabric).
    OtherSocket,
}

impl CostClass {
    pub const ALL: [CostClass; 4] = [
        CostClass::SameCore,
        CostClass::SameL3,
        CostClass::SameSocket,
        CostClass::OtherSocket,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CostClass::SameCore => "same-core",
            CostClass::SameL3 => "same-l3",
            CostClass::SameSocket => "same-socket",
            CostClass::OtherSocket => "other-socket",
        }
    }
}

impl fmt::Display for CostClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One hardware thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    pub id: CpuId,
    /// Index into [`Topology::cores`].
    pub core: usize,
    /// May this process run on it (sched_getaffinity)?
    pub allowed: bool,
}

/// One physical core: its hardware threads share L1/L2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Core {
    pub index: usize,
    pub socket: usize,
    /// Index into [`Topology::numa_nodes`].
    pub numa: usize,
    /// Index into [`Topology::l3_domains`].
    pub l3: usize,
    /// Hardware threads, allowed or not.
    pub cpus: CpuSet,
}

/// A group of cores sharing one last-level cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L3Domain {
    pub index: usize,
    pub socket: usize,
    pub cores: Vec<usize>,
    pub cpus: CpuSet,
}

/// A NUMA node: memory local to its CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    pub index: usize,
    /// The kernel's node number (`numactl --membind`).
    pub os_id: u32,
    pub sockets: Vec<usize>,
    pub cpus: CpuSet,
}

/// A socket (physical package).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Socket {
    pub index: usize,
    /// `physical_package_id` as the kernel reports it.
    pub package_id: u32,
    pub numa: Vec<usize>,
    pub l3s: Vec<usize>,
    pub cores: Vec<usize>,
    pub cpus: CpuSet,
}

/// The machine. Invariants: every CPU belongs to exactly one core, every core
/// to exactly one L3 domain, NUMA node and socket; an L3 domain lies in one
/// socket; `cpus` is sorted by id; indices are dense.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    name: String,
    sockets: Vec<Socket>,
    numa: Vec<NumaNode>,
    l3s: Vec<L3Domain>,
    cores: Vec<Core>,
    cpus: Vec<CpuInfo>,
}

/// One CPU as a source reports it, before grouping.
#[derive(Clone, Debug)]
pub(crate) struct RawCpu {
    pub id: CpuId,
    pub package: u32,
    /// Same key ⇔ same core (within a package): the first CPU of `thread_siblings_list`.
    pub core_key: u32,
    /// Same key ⇔ same L3 (within a package); `None`: one L3 per socket.
    pub l3_key: Option<u32>,
    /// NUMA node; `None`: node 0.
    pub node: Option<u32>,
    pub allowed: bool,
}

impl Topology {
    /// Groups raw CPUs into the tree. `name` is how plans and trees refer to the machine.
    pub(crate) fn from_raw(name: String, mut raw: Vec<RawCpu>) -> Result<Topology, TopologyError> {
        if raw.is_empty() {
            return Err(TopologyError::Empty);
        }
        raw.sort_by_key(|r| r.id);
        raw.dedup_by_key(|r| r.id);

        let packages: Vec<u32> = dedup_sorted(raw.iter().map(|r| r.package));
        let socket_of_package = |p: u32| packages.binary_search(&p).unwrap_or(0);
        let node_ids: Vec<u32> = dedup_sorted(raw.iter().map(|r| r.node.unwrap_or(0)));
        let numa_of_node = |n: u32| node_ids.binary_search(&n).unwrap_or(0);

        // L3 domains: keyed by (socket, key); ordered by (socket, first CPU).
        let mut l3_first: BTreeMap<(usize, Option<u32>), CpuId> = BTreeMap::new();
        // Cores: keyed by (socket, core key); ordered later by (socket, l3, first CPU).
        let mut core_members: BTreeMap<(usize, u32), Vec<&RawCpu>> = BTreeMap::new();
        for r in &raw {
            let s = socket_of_package(r.package);
            l3_first.entry((s, r.l3_key)).or_insert(r.id);
            core_members.entry((s, r.core_key)).or_default().push(r);
        }
        let mut l3_order: Vec<((usize, Option<u32>), CpuId)> = l3_first.into_iter().collect();
        l3_order.sort_by_key(|&((s, _), first)| (s, first));
        let l3_index: BTreeMap<(usize, Option<u32>), usize> = l3_order
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (*k, i))
            .collect();

        // A core's L3 and node are those of its first thread.
        let mut core_list: Vec<(usize, usize, usize, Vec<&RawCpu>)> = core_members
            .into_iter()
            .map(|((s, _), members)| {
                let first = members[0];
                let l3 = l3_index[&(s, first.l3_key)];
                let numa = numa_of_node(first.node.unwrap_or(0));
                (s, l3, numa, members)
            })
            .collect();
        core_list.sort_by_key(|(s, l3, _, m)| (*s, *l3, m[0].id));

        let mut sockets: Vec<Socket> = packages
            .iter()
            .enumerate()
            .map(|(index, &package_id)| Socket {
                index,
                package_id,
                numa: Vec::new(),
                l3s: Vec::new(),
                cores: Vec::new(),
                cpus: CpuSet::new(),
            })
            .collect();
        let mut numa: Vec<NumaNode> = node_ids
            .iter()
            .enumerate()
            .map(|(index, &os_id)| NumaNode {
                index,
                os_id,
                sockets: Vec::new(),
                cpus: CpuSet::new(),
            })
            .collect();
        let mut l3s: Vec<L3Domain> = l3_order
            .iter()
            .enumerate()
            .map(|(index, ((s, _), _))| L3Domain {
                index,
                socket: *s,
                cores: Vec::new(),
                cpus: CpuSet::new(),
            })
            .collect();
        let mut cores = Vec::with_capacity(core_list.len());
        let mut cpus = Vec::with_capacity(raw.len());
        for (index, (s, l3, n, members)) in core_list.into_iter().enumerate() {
            let set: CpuSet = members.iter().map(|r| r.id).collect();
            for r in &members {
                cpus.push(CpuInfo {
                    id: r.id,
                    core: index,
                    allowed: r.allowed,
                });
            }
            sockets[s].cores.push(index);
            sockets[s].cpus.extend(&set);
            push_unique(&mut sockets[s].l3s, l3);
            push_unique(&mut sockets[s].numa, n);
            numa[n].cpus.extend(&set);
            push_unique(&mut numa[n].sockets, s);
            l3s[l3].cores.push(index);
            l3s[l3].cpus.extend(&set);
            cores.push(Core {
                index,
                socket: s,
                numa: n,
                l3,
                cpus: set,
            });
        }
        cpus.sort_by_key(|c| c.id);
        for s in &mut sockets {
            s.numa.sort_unstable();
            s.l3s.sort_unstable();
        }
        Ok(Topology {
            name,
            sockets,
            numa,
            l3s,
            cores,
            cpus,
        })
    }

    /// A described machine: `4x6` (sockets × cores), `2x12x2` (× threads per
    /// core), or `sockets=2,numa=1,l3=1,cores=12,threads=2` (numa and l3 per
    /// socket, cores per L3). All CPUs are allowed.
    pub fn described(spec: &str) -> Result<Topology, TopologyError> {
        described::parse(spec)
    }

    /// This machine, from `/sys`, with the CPUs this process may use marked allowed.
    pub fn discover() -> Result<Topology, TopologyError> {
        sysfs::discover_host()
    }

    /// A machine from a sysfs tree under `root` (`root/sys/devices/system/…`).
    /// `allowed`: the CPUs this process may use; `None` allows every online CPU.
    pub fn discover_at(
        root: &std::path::Path,
        allowed: Option<&CpuSet>,
    ) -> Result<Topology, TopologyError> {
        sysfs::discover(root, allowed)
    }

    /// The same machine with only `allowed` CPUs allowed (those outside the
    /// machine are an error).
    pub fn with_allowed(mut self, allowed: &CpuSet) -> Result<Topology, TopologyError> {
        for cpu in allowed.iter() {
            if self.cpu(cpu).is_none() {
                return Err(self.no_such_cpu(cpu));
            }
        }
        for c in &mut self.cpus {
            c.allowed = allowed.contains(c.id);
        }
        Ok(self)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn sockets(&self) -> &[Socket] {
        &self.sockets
    }

    pub fn numa_nodes(&self) -> &[NumaNode] {
        &self.numa
    }

    pub fn l3_domains(&self) -> &[L3Domain] {
        &self.l3s
    }

    pub fn cores(&self) -> &[Core] {
        &self.cores
    }

    /// Every online CPU, sorted by id.
    pub fn cpus(&self) -> &[CpuInfo] {
        &self.cpus
    }

    pub fn cpu(&self, id: CpuId) -> Option<&CpuInfo> {
        self.cpus
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .map(|i| &self.cpus[i])
    }

    pub fn all_cpus(&self) -> CpuSet {
        self.cpus.iter().map(|c| c.id).collect()
    }

    pub fn allowed_cpus(&self) -> CpuSet {
        self.cpus
            .iter()
            .filter(|c| c.allowed)
            .map(|c| c.id)
            .collect()
    }

    pub fn is_allowed(&self, cpu: CpuId) -> bool {
        self.cpu(cpu).is_some_and(|c| c.allowed)
    }

    /// The allowed hardware threads of a core (empty if none is allowed).
    pub fn allowed_cpus_of_core(&self, core: usize) -> CpuSet {
        self.cores[core]
            .cpus
            .iter()
            .filter(|&c| self.is_allowed(c))
            .collect()
    }

    /// Cores with at least one allowed hardware thread, in tree order.
    pub fn allowed_cores(&self) -> Vec<usize> {
        (0..self.cores.len())
            .filter(|&c| self.cores[c].cpus.iter().any(|cpu| self.is_allowed(cpu)))
            .collect()
    }

    pub fn core_of(&self, cpu: CpuId) -> Option<&Core> {
        self.cpu(cpu).map(|c| &self.cores[c.core])
    }

    /// The socket index of a CPU.
    pub fn socket_of(&self, cpu: CpuId) -> Option<usize> {
        self.core_of(cpu).map(|c| c.socket)
    }

    /// The L3 domain index of a CPU.
    pub fn l3_of(&self, cpu: CpuId) -> Option<usize> {
        self.core_of(cpu).map(|c| c.l3)
    }

    /// The kernel's NUMA node id of a CPU.
    pub fn numa_node_of(&self, cpu: CpuId) -> Option<u32> {
        self.core_of(cpu).map(|c| self.numa[c.numa].os_id)
    }

    /// The cost class of communication between two CPUs; `None` if either does not exist.
    pub fn cost(&self, a: CpuId, b: CpuId) -> Option<CostClass> {
        let (ca, cb) = (self.core_of(a)?, self.core_of(b)?);
        Some(if ca.index == cb.index {
            CostClass::SameCore
        } else if ca.l3 == cb.l3 {
            CostClass::SameL3
        } else if ca.socket == cb.socket {
            CostClass::SameSocket
        } else {
            CostClass::OtherSocket
        })
    }

    /// The threads per core of the largest core (1 without SMT).
    pub fn threads_per_core_max(&self) -> usize {
        self.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(0)
    }

    /// Checks that every CPU of `set` exists and is allowed.
    pub fn check_allowed(&self, set: &CpuSet) -> Result<(), TopologyError> {
        for cpu in set.iter() {
            if self.cpu(cpu).is_none() {
                return Err(self.no_such_cpu(cpu));
            }
            if !self.is_allowed(cpu) {
                return Err(TopologyError::CpuNotAllowed {
                    cpu,
                    allowed: self.allowed_cpus().to_string(),
                });
            }
        }
        Ok(())
    }

    /// Parses a CPU list and checks it against the machine.
    pub fn parse_cpu_list(&self, list: &str) -> Result<CpuSet, TopologyError> {
        let set = CpuSet::parse(list)?;
        self.check_allowed(&set)?;
        Ok(set)
    }

    fn no_such_cpu(&self, cpu: CpuId) -> TopologyError {
        TopologyError::NoSuchCpu {
            cpu,
            machine: self.name.clone(),
            cpus: self.all_cpus().to_string(),
        }
    }

    /// "2 sockets, 4 NUMA nodes, 4 L3 domains, 24 cores, 48 threads".
    pub fn summary(&self) -> String {
        let allowed = self.cpus.iter().filter(|c| c.allowed).count();
        let mut s = format!(
            "{}, {}, {}, {}, {}",
            plural(self.sockets.len(), "socket"),
            plural(self.numa.len(), "NUMA node"),
            plural(self.l3s.len(), "L3 domain"),
            plural(self.cores.len(), "core"),
            plural(self.cpus.len(), "thread"),
        );
        if allowed != self.cpus.len() {
            s.push_str(&format!("; {allowed} allowed"));
        }
        s
    }
}

pub(crate) fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn dedup_sorted(it: impl Iterator<Item = u32>) -> Vec<u32> {
    let mut v: Vec<u32> = it.collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn push_unique(v: &mut Vec<usize>, x: usize) {
    if !v.contains(&x) {
        v.push(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_classes_on_an_smt_machine() {
        // sockets=2, l3=2 per socket, 3 cores per L3, 2 threads: 12 cores, 24 CPUs.
        let t = Topology::described("sockets=2,l3=2,cores=3,threads=2").unwrap();
        assert_eq!(t.cores().len(), 12);
        assert_eq!(t.cpus().len(), 24);
        // Linux numbering: CPU 0 and CPU 12 are the two threads of core 0.
        assert_eq!(t.cost(0, 12), Some(CostClass::SameCore));
        assert_eq!(t.cost(0, 0), Some(CostClass::SameCore));
        assert_eq!(t.cost(0, 2), Some(CostClass::SameL3));
        assert_eq!(t.cost(0, 3), Some(CostClass::SameSocket));
        assert_eq!(t.cost(0, 6), Some(CostClass::OtherSocket));
        assert_eq!(t.cost(18, 5), Some(CostClass::OtherSocket));
        assert_eq!(t.cost(0, 99), None);
        assert!(CostClass::SameCore < CostClass::SameL3);
        assert!(CostClass::SameSocket < CostClass::OtherSocket);
    }

    #[test]
    fn queries_agree_with_the_tree() {
        let t = Topology::described("sockets=2,numa=2,l3=2,cores=3,threads=2").unwrap();
        assert_eq!(t.numa_nodes().len(), 4);
        for cpu in t.cpus() {
            let core = &t.cores()[cpu.core];
            assert!(core.cpus.contains(cpu.id));
            assert!(t.l3_domains()[core.l3].cpus.contains(cpu.id));
            assert!(t.sockets()[core.socket].cpus.contains(cpu.id));
            assert!(t.numa_nodes()[core.numa].cpus.contains(cpu.id));
            assert_eq!(t.l3_domains()[core.l3].socket, core.socket);
        }
        assert_eq!(t.numa_node_of(0), Some(0));
        assert_eq!(t.numa_node_of(3), Some(1));
        assert_eq!(t.numa_node_of(6), Some(2));
        assert_eq!(t.numa_node_of(15), Some(1), "SMT sibling of CPU 3");
        assert_eq!(t.socket_of(23), Some(1));
    }

    #[test]
    fn allowed_cpus_are_checked() {
        let t = Topology::described("2x2")
            .unwrap()
            .with_allowed(&CpuSet::parse("0-2").unwrap())
            .unwrap();
        assert_eq!(t.allowed_cpus().to_string(), "0-2");
        assert_eq!(t.allowed_cores(), vec![0, 1, 2]);
        assert!(t.parse_cpu_list("0-1").is_ok());
        assert!(matches!(
            t.parse_cpu_list("3"),
            Err(TopologyError::CpuNotAllowed { cpu: 3, .. })
        ));
        assert!(matches!(
            t.parse_cpu_list("7"),
            Err(TopologyError::NoSuchCpu { cpu: 7, .. })
        ));
        assert!(t.summary().ends_with("; 3 allowed"), "{}", t.summary());
    }
}
