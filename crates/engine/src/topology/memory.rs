//! The memory this process may still take: the kernel's `MemAvailable`, and
//! the limit of its memory cgroup when one is set (cgroup v2 `memory.max`
//! of its cgroup and every ancestor, or v1 `memory.limit_in_bytes`), less
//! what the cgroup already uses. A workload whose data needs more is refused
//! before it is loaded, instead of meeting an allocation failure (an abort)
//! or the OOM killer halfway through.

use std::fmt;
use std::path::{Path, PathBuf};

/// A cgroup's memory limit and what it uses now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLimit {
    /// The file the limit was read from.
    pub file: PathBuf,
    pub limit: u64,
    pub usage: u64,
}

impl CgroupLimit {
    pub fn left(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }
}

/// What [`available`] found; `None` where it could not be read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryAvailable {
    /// `MemAvailable` of `/proc/meminfo`, in bytes.
    pub mem_available: Option<u64>,
    /// The tightest memory cgroup limit over this process's cgroup and its
    /// ancestors, if any is set.
    pub cgroup: Option<CgroupLimit>,
}

impl MemoryAvailable {
    /// Bytes this process may still take: the smaller of the two, or `None`
    /// when neither could be read.
    pub fn bytes(&self) -> Option<u64> {
        match (self.mem_available, &self.cgroup) {
            (Some(m), Some(c)) => Some(m.min(c.left())),
            (Some(m), None) => Some(m),
            (None, Some(c)) => Some(c.left()),
            (None, None) => None,
        }
    }
}

impl fmt::Display for MemoryAvailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mem_available {
            Some(m) => write!(f, "MemAvailable {}", gib(m))?,
            None => write!(f, "MemAvailable unknown")?,
        }
        if let Some(c) = &self.cgroup {
            write!(
                f,
                "; cgroup limit {} ({}) of which {} in use",
                gib(c.limit),
                c.file.display(),
                gib(c.usage)
            )?;
        }
        Ok(())
    }
}

/// Bytes as GiB with two decimals, for messages.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Reads the memory this process may still take (see the module documentation).
pub fn available() -> MemoryAvailable {
    let mem_available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| mem_available_of(&s));
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| cgroup_limit(Path::new("/sys/fs/cgroup"), &s));
    MemoryAvailable {
        mem_available,
        cgroup,
    }
}

/// `MemAvailable` of a `/proc/meminfo` text, in bytes.
fn mem_available_of(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemAvailable:")?;
        let kb: u64 = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
        Some(kb * 1024)
    })
}

/// A limit file's value: `None` for "max" (v2) or a value so large that it
/// means no limit (v1 writes the largest page multiple of i64).
fn limit_value(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v < 1 << 62).then_some(v)
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The tightest memory limit of the cgroup that `/proc/self/cgroup` names
/// (its `0::` line, v2; or its `memory` controller's line, v1) and of its
/// ancestors, under the cgroup file system mounted at `root`.
fn cgroup_limit(root: &Path, proc_cgroup: &str) -> Option<CgroupLimit> {
    let mut best: Option<CgroupLimit> = None;
    let mut consider = |c: CgroupLimit| {
        if best.as_ref().is_none_or(|b| c.left() < b.left()) {
            best = Some(c);
        }
    };
    // A limit in `dir` or an ancestor up to `root`: its file's value and the
    // usage file's beside it.
    let mut scan = |dir: &Path, root: &Path, limit_file: &str, usage_file: &str| {
        for dir in ancestors(dir, root) {
            let file = dir.join(limit_file);
            let Some(limit) = std::fs::read_to_string(&file)
                .ok()
                .and_then(|t| limit_value(&t))
            else {
                continue;
            };
            let usage = read_u64(&dir.join(usage_file)).unwrap_or(0);
            consider(CgroupLimit { file, limit, usage });
        }
    };
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if id == "0" && controllers.is_empty() {
            // v2: the cgroup and each ancestor.
            scan(&root.join(rel), root, "memory.max", "memory.current");
        } else if controllers.split(',').any(|c| c == "memory") {
            // v1: the memory hierarchy's own mount. Inside a container the
            // path may not exist there (the mount is the container's own
            // cgroup): then its root stands for it.
            let mount = root.join("memory");
            let dir = if mount.join(rel).is_dir() {
                mount.join(rel)
            } else {
                mount.clone()
            };
            scan(
                &dir,
                &mount,
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            );
        }
    }
    best
}

/// `dir` and its ancestors up to and including `root`.
fn ancestors(dir: &Path, root: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .take_while(|d| d.starts_with(root))
        .map(Path::to_path_buf)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_read_in_bytes() {
        let text = "MemTotal:       24684084 kB\nMemFree: 1 kB\nMemAvailable:   22691924 kB\n";
        assert_eq!(mem_available_of(text), Some(22_691_924 * 1024));
        assert_eq!(mem_available_of("MemTotal: 5 kB\n"), None);
    }

    fn fake_root(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("islands-cgroup-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_tightest_v2_limit_of_the_cgroup_and_its_ancestors_counts() {
        let root = fake_root("v2");
        let leaf = root.join("a/b");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(root.join("a/memory.max"), "1073741824\n").unwrap();
        std::fs::write(root.join("a/memory.current"), "536870912\n").unwrap();
        std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
        std::fs::write(leaf.join("memory.current"), "100\n").unwrap();
        let c = cgroup_limit(&root, "0::/a/b\n").expect("a limit");
        assert_eq!((c.limit, c.usage, c.left()), (1 << 30, 1 << 29, 1 << 29));
        assert_eq!(c.file, root.join("a/memory.max"));
        // No limit anywhere: none.
        std::fs::write(root.join("a/memory.max"), "max\n").unwrap();
        assert_eq!(cgroup_limit(&root, "0::/a/b\n"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_v1_memory_limit_is_read_and_no_limit_is_none() {
        let root = fake_root("v1");
        let dir = root.join("memory/job");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            root.join("memory/memory.limit_in_bytes"),
            "9223372036854771712\n",
        )
        .unwrap();
        std::fs::write(dir.join("memory.limit_in_bytes"), "2147483648\n").unwrap();
        std::fs::write(dir.join("memory.usage_in_bytes"), "1073741824\n").unwrap();
        let text = "5:devices:/\n4:memory:/job\n0::/\n";
        let c = cgroup_limit(&root, text).expect("a limit");
        assert_eq!(c.left(), 1 << 30);
        let m = MemoryAvailable {
            mem_available: Some(8 << 30),
            cgroup: Some(c),
        };
        assert_eq!(m.bytes(), Some(1 << 30));
        assert!(m.to_string().contains("cgroup limit 2.00 GiB"), "{m}");
        // The path of another namespace: the mount's own root stands for it.
        assert_eq!(cgroup_limit(&root, "4:memory:/elsewhere\n"), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
