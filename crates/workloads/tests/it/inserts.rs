//! The insert microbenchmark: every client's records land in its own table,
//! with no gap and no duplicate, and a full table is a clear error.

use std::sync::Arc;
use std::time::Duration;

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands_bench::driver::{self, DriverConfig, WorkerSpec};
use islands_bench::progress::DisplayMode;
use islands_workloads::inserts::{self, Inserts, InsertsConfig};

/// Records of table `t`, read back: they must be 0..n in order.
fn records(island: &Island, t: u16) -> Vec<u64> {
    let mut out = Vec::new();
    island
        .catalog()
        .table(t)
        .for_each_row(|k, _, _| out.push(k));
    out.sort_unstable();
    out
}

/// One island with two clients (one shared log) and two islands with one
/// client each: what the driver counts is at most what the tables hold (the
/// warm-up's records are there too), and each table holds exactly the keys
/// 0..n of its own client.
#[test]
fn each_client_fills_its_own_table_without_gaps() {
    let cfg = InsertsConfig {
        row_bytes: 64,
        rows_per_client: 1 << 22,
    };
    for per_island in [2usize, 1] {
        let n_islands = 2 / per_island;
        let mut islands = Vec::new();
        for _ in 0..n_islands {
            let cc = if per_island > 1 {
                CcKind::NoWait
            } else {
                CcKind::None
            };
            let (island, _) = Island::open(
                IslandConfig::new(cc, per_island),
                &inserts::tables(&cfg, per_island),
            )
            .unwrap();
            islands.push(island);
        }
        let workers: Vec<WorkerSpec> = (0..2)
            .map(|w| WorkerSpec {
                island: w / per_island,
                cpu: None,
            })
            .collect();
        let table_of = (0..2).map(|w| (w % per_island) as u16).collect();
        let w = Inserts::new(cfg.clone(), table_of).unwrap();
        let dcfg = DriverConfig {
            warmup: Duration::ZERO,
            measure: Duration::from_millis(200),
            display: DisplayMode::Quiet,
            ..DriverConfig::default()
        };
        let report = driver::run_islands(&islands, &workers, Arc::new(w), &dcfg).unwrap();
        assert!(report.committed > 100, "{} commits", report.committed);
        let mut held = 0;
        for island in &islands {
            for t in 0..per_island as u16 {
                let keys = records(island, t);
                assert!(
                    keys.iter().copied().eq(0..keys.len() as u64),
                    "table {t} has gaps or duplicates"
                );
                held += keys.len() as u64;
            }
        }
        assert!(
            held >= report.committed,
            "{held} records, {} commits",
            report.committed
        );
    }
}

#[test]
fn a_full_table_and_bad_sizes_are_clear_errors() {
    let cfg = InsertsConfig {
        row_bytes: 32,
        rows_per_client: 50,
    };
    let (island, _) = Island::open(
        IslandConfig::new(CcKind::None, 1),
        &inserts::tables(&cfg, 1),
    )
    .unwrap();
    let w = Inserts::new(cfg, vec![0]).unwrap();
    let dcfg = DriverConfig {
        warmup: Duration::ZERO,
        measure: Duration::from_millis(200),
        display: DisplayMode::Quiet,
        ..DriverConfig::default()
    };
    let workers = [WorkerSpec {
        island: 0,
        cpu: None,
    }];
    let err = driver::run_islands(&[island], &workers, Arc::new(w), &dcfg)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("--rows-per-client"), "{err}");
    for bad in [
        InsertsConfig {
            row_bytes: 8,
            ..InsertsConfig::default()
        },
        InsertsConfig {
            rows_per_client: 0,
            ..InsertsConfig::default()
        },
    ] {
        assert!(bad.check().is_err());
    }
}
