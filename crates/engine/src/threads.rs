//! The threads a deployment runs, for `SHOW threads` and the server's
//! metrics: each thread registers itself where it starts (its kernel thread
//! id, its role, its island) and leaves the registry when it ends. Nothing
//! is counted while a thread runs: its CPU time (user and system), the CPU
//! it last ran on and the CPUs it may run on are read from the kernel when
//! a snapshot is taken (`/proc/self/task/<tid>/stat`, `sched_getaffinity`),
//! so registering costs one lock at thread start and nothing on any path
//! after it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::cpu::CpuTime;
use crate::topology::CpuSet;

/// What a registered thread does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Runs transactions: a deployment's executor (worker) thread.
    Executor,
    /// Writes and fdatasyncs an island's log.
    LogWriter,
    /// Prepares an island's next log segment ahead of time.
    LogPreallocator,
    /// Takes an island's periodic checkpoints.
    Checkpointer,
    /// Faults an island's arena chunks in ahead of its workers.
    Prefaulter,
    /// Watches a deployment's logs and stops it when one fails.
    Watcher,
    /// Speaks the wire protocol for a server's connections.
    Server,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Executor => "executor",
            Role::LogWriter => "log-writer",
            Role::LogPreallocator => "log-prealloc",
            Role::Checkpointer => "checkpointer",
            Role::Prefaulter => "prefaulter",
            Role::Watcher => "watcher",
            Role::Server => "server",
        }
    }
}

/// One registered thread.
#[derive(Debug)]
struct Entry {
    id: u64,
    name: String,
    role: Role,
    island: Option<u32>,
    tid: i32,
    started: Instant,
}

/// The registry of a deployment's threads. Cheap to clone: clones share
/// one list. Two registries are equal when they are the same list.
#[derive(Clone, Debug, Default)]
pub struct ThreadRegistry {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: AtomicU64,
    list: Mutex<Vec<Entry>>,
}

impl PartialEq for ThreadRegistry {
    fn eq(&self, other: &ThreadRegistry) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for ThreadRegistry {}

/// A thread's place in a [`ThreadRegistry`]: dropping it (at the end of
/// the thread) takes the thread out.
#[must_use = "the thread leaves the registry when this is dropped"]
#[derive(Debug)]
pub struct Registered {
    inner: Arc<Inner>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.inner.list.lock().retain(|e| e.id != self.id);
    }
}

/// A registered thread as a snapshot saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadInfo {
    /// Its name (the std thread's name, else its role).
    pub name: String,
    pub role: Role,
    pub island: Option<u32>,
    /// The kernel's thread id.
    pub tid: i32,
    /// The CPUs it may run on (its affinity), `None` if it could not be read.
    pub cpus: Option<CpuSet>,
    /// The CPU it last ran on.
    pub last_cpu: Option<u32>,
    /// CPU time in user and in system mode since it started (10 ms ticks),
    /// `None` if the kernel no longer lists it (it was ending).
    pub user: Option<Duration>,
    pub system: Option<Duration>,
    /// Wall time since it registered.
    pub alive_for: Duration,
}

impl ThreadInfo {
    /// User plus system CPU time.
    pub fn cpu_time(&self) -> Option<Duration> {
        Some(self.user? + self.system?)
    }

    /// Its CPU time over its wall time since it started: 1.0 is one core
    /// busy all along.
    pub fn utilisation(&self) -> Option<f64> {
        let wall = self.alive_for.as_secs_f64();
        (wall > 0.0).then(|| self.cpu_time().map(|c| c.as_secs_f64() / wall))?
    }
}

impl ThreadRegistry {
    pub fn new() -> ThreadRegistry {
        ThreadRegistry::default()
    }

    /// Registers the calling thread, until the returned guard drops.
    pub fn enter(&self, role: Role, island: Option<u32>) -> Registered {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let name = std::thread::current()
            .name()
            .map_or_else(|| role.name().to_string(), str::to_string);
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        self.inner.list.lock().push(Entry {
            id,
            name,
            role,
            island,
            tid,
            started: Instant::now(),
        });
        Registered {
            inner: Arc::clone(&self.inner),
            id,
        }
    }

    /// Every registered thread, in the order they registered, with what
    /// the kernel says of it now.
    pub fn snapshot(&self) -> Vec<ThreadInfo> {
        let entries: Vec<(String, Role, Option<u32>, i32, Instant)> = self
            .inner
            .list
            .lock()
            .iter()
            .map(|e| (e.name.clone(), e.role, e.island, e.tid, e.started))
            .collect();
        entries
            .into_iter()
            .map(|(name, role, island, tid, started)| {
                let stat = CpuTime::task_from_proc_stat(tid).ok();
                let cpus = rustix::process::Pid::from_raw(tid)
                    .and_then(|pid| rustix::thread::sched_getaffinity(Some(pid)).ok())
                    .map(|set| {
                        (0..rustix::thread::CpuSet::MAX_CPU)
                            .filter(|&c| set.is_set(c))
                            .map(|c| c as u32)
                            .collect()
                    });
                ThreadInfo {
                    name,
                    role,
                    island,
                    tid,
                    cpus,
                    last_cpu: stat.map(|s| s.last_cpu),
                    user: stat.map(|s| s.user),
                    system: stat.map(|s| s.system),
                    alive_for: started.elapsed(),
                }
            })
            .collect()
    }
}

/// Registers the calling thread in `registry`, if there is one.
pub(crate) fn enter(
    registry: Option<&ThreadRegistry>,
    role: Role,
    island: Option<u32>,
) -> Option<Registered> {
    registry.map(|r| r.enter(role, island))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_is_listed_while_it_runs_with_its_cpu_time() {
        let reg = ThreadRegistry::new();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let (done, spun) = std::sync::mpsc::channel::<()>();
        let r = reg.clone();
        let h = std::thread::Builder::new()
            .name("spinner".into())
            .spawn(move || {
                let _reg = r.enter(Role::Executor, Some(3));
                // Spin until 60 ms of CPU time are used (10 s at most).
                let t0 = CpuTime::thread_now();
                let wall = Instant::now();
                while CpuTime::thread_now() - t0 < Duration::from_millis(60)
                    && wall.elapsed() < Duration::from_secs(10)
                {
                    std::hint::spin_loop();
                }
                done.send(()).unwrap();
                wait.recv().unwrap();
            })
            .unwrap();
        spun.recv().unwrap();
        let snap = reg.snapshot();
        assert_eq!(snap.len(), 1, "{snap:?}");
        let t = &snap[0];
        assert_eq!(
            (t.name.as_str(), t.role, t.island),
            ("spinner", Role::Executor, Some(3))
        );
        assert!(t.tid > 0);
        // /proc counts 10 ms ticks: 60 ms spun shows as 50 ms at least.
        let cpu = t.cpu_time().expect("the kernel lists a running thread");
        assert!(cpu >= Duration::from_millis(50), "{t:?}");
        assert!(t.utilisation().unwrap() > 0.0, "{t:?}");
        assert!(t.cpus.as_ref().is_some_and(|c| !c.is_empty()), "{t:?}");
        assert!(t.last_cpu.is_some());
        go.send(()).unwrap();
        h.join().unwrap();
        assert!(reg.snapshot().is_empty(), "a thread leaves when it ends");
    }
}
