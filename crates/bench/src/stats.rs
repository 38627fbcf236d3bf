//! The names of a workload's transaction types, and the monitor's view of
//! the executors' progress counters ([`ProgressCounter`]).

use std::sync::Arc;

use islands::proc::stats::{ProgressCounter, MAX_TXN_TYPES};

/// The names of a workload's transaction types; a type is its index here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnTypes {
    names: Vec<String>,
}

impl TxnTypes {
    /// Between 1 and [`MAX_TXN_TYPES`] distinct, non-empty names.
    pub fn new(names: &[&str]) -> Result<TxnTypes, String> {
        if names.is_empty() || names.len() > MAX_TXN_TYPES {
            return Err(format!(
                "{} transaction types given ({names:?}); a workload has 1 to {MAX_TXN_TYPES}",
                names.len()
            ));
        }
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() {
                return Err(format!("transaction type {i} has an empty name"));
            }
            if names[..i].contains(name) {
                return Err(format!("transaction type '{name}' is named twice"));
            }
        }
        Ok(TxnTypes {
            names: names.iter().map(|s| s.to_string()).collect(),
        })
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, ty: usize) -> &str {
        &self.names[ty]
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

/// The monitor's view: all workers' counters, summed on demand.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    counters: Vec<Arc<ProgressCounter>>,
}

impl Progress {
    pub fn new() -> Progress {
        Progress::default()
    }

    /// A counter for one more worker; move it to that worker.
    pub fn add_worker(&mut self) -> Arc<ProgressCounter> {
        let c = ProgressCounter::new();
        self.counters.push(Arc::clone(&c));
        c
    }

    pub fn from_counters(counters: Vec<Arc<ProgressCounter>>) -> Progress {
        Progress { counters }
    }

    pub fn counters(&self) -> &[Arc<ProgressCounter>] {
        &self.counters
    }

    /// Sum of the published counts. Each term is at most `PUBLISH_EVERY - 1`
    /// commits behind its worker.
    pub fn total(&self) -> u64 {
        self.counters.iter().map(|c| c.load()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use islands::proc::stats::WorkerStats;

    #[test]
    fn txn_types_validate_names() {
        let t = TxnTypes::new(&["NewOrder", "Payment"]).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.name(1), "Payment");
        assert_eq!(t.index_of("NewOrder"), Some(0));
        assert_eq!(t.index_of("Delivery"), None);
        assert!(TxnTypes::new(&[]).is_err());
        assert!(TxnTypes::new(&["a"; 9]).is_err());
        assert!(TxnTypes::new(&["a", "b", "a"])
            .unwrap_err()
            .contains("twice"));
        assert!(TxnTypes::new(&["a", ""]).is_err());
    }

    #[test]
    fn progress_sums_workers_while_they_run() {
        let mut progress = Progress::new();
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let counter = progress.add_worker();
                std::thread::spawn(move || {
                    let mut s = WorkerStats::new();
                    for _ in 0..10_000 {
                        s.record_commit(0, 100);
                        s.maybe_publish(&counter);
                    }
                    s.publish(&counter);
                })
            })
            .collect();
        let mut last = 0;
        while workers.iter().any(|w| !w.is_finished()) {
            let now = progress.total();
            assert!(now >= last, "progress went back from {last} to {now}");
            last = now;
        }
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(progress.total(), 20_000);
    }
}
