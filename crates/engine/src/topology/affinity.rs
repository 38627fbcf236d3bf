//! The CPUs this process may run on, and pinning the calling thread to one.

use crate::Error;

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| set.is_set(c))
            .collect(),
        Err(_) => (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect(),
    }
}

/// Pins the calling thread to one CPU. Errors are reported, not fatal.
pub fn pin_to(cpu: usize) -> Result<(), Error> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)
        .map_err(|e| Error::Config(format!("cannot pin a thread to CPU {cpu}: {e}")))
}
