//! Discovery from `/sys`, so a fresh machine needs nothing installed.
//!
//! Per online CPU N, under `sys/devices/system/cpu/cpuN`:
//! `topology/physical_package_id` (missing or -1: package 0),
//! `topology/thread_siblings_list` (missing: a core of its own), and the cache
//! `cache/indexK` whose `level` is 3 (`shared_cpu_list`; missing on some VMs:
//! one L3 per socket). NUMA nodes come from `sys/devices/system/node/nodeN/cpulist`
//! (missing: one node). Every path is under a root, so tests build a fake tree.

use std::fs;
use std::path::{Path, PathBuf};

use super::{CpuId, CpuSet, RawCpu, Topology, TopologyError};

pub(super) fn discover_host() -> Result<Topology, TopologyError> {
    let allowed = host_allowed_cpus();
    let mut t = discover(Path::new("/"), allowed.as_ref())?;
    // Plans and trees name the machine by its host name.
    t.name = read_trimmed(Path::new("/proc/sys/kernel/hostname"))
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string());
    Ok(t)
}

/// The CPUs this process may run on: sched_getaffinity, or else
/// `Cpus_allowed_list` of `/proc/self/status`; `None` if neither answers.
fn host_allowed_cpus() -> Option<CpuSet> {
    if let Ok(set) = rustix::thread::sched_getaffinity(None) {
        let ids: Vec<CpuId> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&i| set.is_set(i))
            .map(|i| i as CpuId)
            .collect();
        if !ids.is_empty() {
            return Some(CpuSet::from_ids(ids));
        }
    }
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    CpuSet::parse(line).ok()
}

pub(super) fn discover(root: &Path, allowed: Option<&CpuSet>) -> Result<Topology, TopologyError> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let online = online_cpus(&cpu_dir)?;
    let nodes = numa_nodes(&root.join("sys/devices/system/node"))?;
    let mut raw = Vec::with_capacity(online.len());
    for id in online.iter() {
        let base = cpu_dir.join(format!("cpu{id}"));
        let package = read_trimmed(&base.join("topology/physical_package_id"))
            .and_then(|s| s.parse::<i64>().ok())
            .filter(|&p| p >= 0)
            .map_or(0, |p| p as u32);
        let core_key = match read_trimmed(&base.join("topology/thread_siblings_list")) {
            Some(list) => parse_list(&base.join("topology/thread_siblings_list"), &list)?
                .first()
                .unwrap_or(id),
            None => id,
        };
        let l3_key = l3_first_cpu(&base.join("cache"))?;
        let node = nodes
            .iter()
            .find(|(_, cpus)| cpus.contains(id))
            .map(|(n, _)| *n);
        raw.push(RawCpu {
            id,
            package,
            core_key,
            l3_key,
            node,
            allowed: allowed.is_none_or(|a| a.contains(id)),
        });
    }
    Topology::from_raw(format!("sysfs at {}", root.display()), raw)
}

fn online_cpus(cpu_dir: &Path) -> Result<CpuSet, TopologyError> {
    let online = cpu_dir.join("online");
    if let Some(list) = read_trimmed(&online) {
        let set = parse_list(&online, &list)?;
        if !set.is_empty() {
            return Ok(set);
        }
    }
    // No `online` file: every cpuN directory.
    let entries = fs::read_dir(cpu_dir).map_err(|e| TopologyError::Sysfs {
        path: cpu_dir.display().to_string(),
        why: e.to_string(),
    })?;
    let ids: Vec<CpuId> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| numbered(&e.file_name().to_string_lossy(), "cpu"))
        .collect();
    if ids.is_empty() {
        return Err(TopologyError::Sysfs {
            path: cpu_dir.display().to_string(),
            why: "no cpuN directories".to_string(),
        });
    }
    Ok(CpuSet::from_ids(ids))
}

/// (node id, its CPUs) for every `nodeN` directory; empty if there is no node directory.
fn numa_nodes(node_dir: &Path) -> Result<Vec<(u32, CpuSet)>, TopologyError> {
    let Ok(entries) = fs::read_dir(node_dir) else {
        return Ok(Vec::new());
    };
    let mut nodes = Vec::new();
    for e in entries.filter_map(|e| e.ok()) {
        let Some(n) = numbered(&e.file_name().to_string_lossy(), "node") else {
            continue;
        };
        let path = e.path().join("cpulist");
        if let Some(list) = read_trimmed(&path) {
            nodes.push((n, parse_list(&path, &list)?));
        }
    }
    nodes.sort_by_key(|(n, _)| *n);
    Ok(nodes)
}

/// The first CPU sharing this CPU's level-3 cache, if the kernel reports one.
fn l3_first_cpu(cache_dir: &Path) -> Result<Option<CpuId>, TopologyError> {
    let Ok(entries) = fs::read_dir(cache_dir) else {
        return Ok(None);
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        if read_trimmed(&dir.join("level")).as_deref() != Some("3") {
            continue;
        }
        let path = dir.join("shared_cpu_list");
        if let Some(list) = read_trimmed(&path) {
            return Ok(parse_list(&path, &list)?.first());
        }
    }
    Ok(None)
}

fn numbered(name: &str, prefix: &str) -> Option<u32> {
    let digits = name.strip_prefix(prefix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn parse_list(path: &Path, list: &str) -> Result<CpuSet, TopologyError> {
    CpuSet::parse(list).map_err(|e| TopologyError::Sysfs {
        path: path.display().to_string(),
        why: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::CostClass;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A temporary directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "islands-sysfs-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, format!("{text}\n")).unwrap();
    }

    /// 2 sockets × 2 cores × 2 threads, Linux numbering: CPU c and c+4 are siblings.
    /// `with_caches`/`with_nodes` leave out the parts some VMs do not have.
    fn fake_tree(with_caches: bool, with_nodes: bool) -> TempDir {
        let dir = TempDir::new();
        let root = &dir.0;
        write(root, "sys/devices/system/cpu/online", "0-7");
        for cpu in 0..8u32 {
            let core = cpu % 4;
            let socket = core / 2;
            let base = format!("sys/devices/system/cpu/cpu{cpu}");
            write(
                root,
                &format!("{base}/topology/physical_package_id"),
                &socket.to_string(),
            );
            write(
                root,
                &format!("{base}/topology/core_id"),
                &(core % 2).to_string(),
            );
            write(
                root,
                &format!("{base}/topology/thread_siblings_list"),
                &format!("{core},{}", core + 4),
            );
            if with_caches {
                write(root, &format!("{base}/cache/index0/level"), "1");
                write(
                    root,
                    &format!("{base}/cache/index0/shared_cpu_list"),
                    &format!("{core},{}", core + 4),
                );
                write(root, &format!("{base}/cache/index3/level"), "3");
                let l3 = if socket == 0 { "0-1,4-5" } else { "2-3,6-7" };
                write(root, &format!("{base}/cache/index3/shared_cpu_list"), l3);
            }
        }
        if with_nodes {
            write(root, "sys/devices/system/node/node0/cpulist", "0-1,4-5");
            write(root, "sys/devices/system/node/node1/cpulist", "2-3,6-7");
            write(root, "sys/devices/system/node/online", "0-1");
        }
        dir
    }

    #[test]
    fn fake_tree_two_sockets_two_cores_two_threads() {
        let dir = fake_tree(true, true);
        let t = discover(&dir.0, None).unwrap();
        assert_eq!(t.sockets().len(), 2);
        assert_eq!(t.numa_nodes().len(), 2);
        assert_eq!(t.l3_domains().len(), 2);
        assert_eq!(t.cores().len(), 4);
        assert_eq!(t.cpus().len(), 8);
        assert_eq!(t.sockets()[0].cpus.to_string(), "0-1,4-5");
        assert_eq!(t.sockets()[1].cpus.to_string(), "2-3,6-7");
        let cores: Vec<String> = t.cores().iter().map(|c| c.cpus.to_string()).collect();
        assert_eq!(cores, ["0,4", "1,5", "2,6", "3,7"]);
        assert_eq!(t.numa_node_of(6), Some(1));
        assert_eq!(t.cost(1, 5), Some(CostClass::SameCore));
        assert_eq!(t.cost(0, 5), Some(CostClass::SameL3));
        assert_eq!(t.cost(0, 2), Some(CostClass::OtherSocket));
        assert_eq!(t.allowed_cpus().len(), 8);
    }

    #[test]
    fn fake_tree_without_caches_or_nodes_falls_back() {
        let dir = fake_tree(false, false);
        let allowed = CpuSet::parse("0-3").unwrap();
        let t = discover(&dir.0, Some(&allowed)).unwrap();
        assert_eq!(t.l3_domains().len(), 2, "one L3 per socket");
        assert_eq!(t.numa_nodes().len(), 1, "one node for the machine");
        assert_eq!(t.cost(0, 1), Some(CostClass::SameL3));
        assert_eq!(t.allowed_cpus().to_string(), "0-3");
        assert!(!t.is_allowed(4));
        assert_eq!(
            t.allowed_cores().len(),
            4,
            "each core keeps one allowed thread"
        );
    }

    #[test]
    fn missing_tree_is_an_error() {
        let dir = TempDir::new();
        let err = discover(&dir.0, None).unwrap_err();
        assert!(matches!(err, TopologyError::Sysfs { .. }), "{err:?}");
    }

    #[test]
    fn discovers_this_machine() {
        let t = Topology::discover().unwrap();
        assert!(!t.cpus().is_empty());
        assert!(!t.allowed_cpus().is_empty());
        assert!(t.sockets().len() <= t.cores().len());
        assert!(t.cores().len() <= t.cpus().len());
        // Every online CPU the kernel lists is in the tree.
        let online = fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
        assert_eq!(t.all_cpus(), CpuSet::parse(&online).unwrap());
        // The allowed set agrees with /proc/self/status.
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap();
        let allowed = CpuSet::parse(line).unwrap().intersection(&t.all_cpus());
        assert_eq!(t.allowed_cpus(), allowed);
    }
}
