//! The microbenchmark on one and on several islands of one process.

use std::sync::Arc;
use std::time::Duration;

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::storage::Col;
use islands_bench::driver::{self, DriverConfig, WorkerSpec};
use islands_bench::progress::DisplayMode;
use islands_workloads::micro::{self, Micro, MicroConfig};

const VAL: Col = Col(0);

/// Sum of the `val` column of every row an island holds, read in one transaction.
fn sum_vals(island: &Island, keys: std::ops::Range<u64>) -> i64 {
    let mut tx = island.worker().unwrap();
    tx.execute(0, |tx| {
        let keys = keys.clone();
        Box::pin(async move {
            let mut s = 0;
            for k in keys {
                let h = tx
                    .get(micro::TABLE, k)
                    .await?
                    .expect("every key of the island is there");
                s += tx.row(h).i64(VAL);
            }
            Ok(s)
        })
    })
    .unwrap()
}

/// Two islands, each holding half of the sites, one worker each, `none`
/// concurrency control: every update lands on the island that owns its key
/// (a key routed to the wrong island would be missing there and abort), and
/// the updates counted by the driver are exactly those found in the tables.
#[test]
fn local_updates_stay_on_their_islands() {
    let cfg = MicroConfig {
        rows: 2_000,
        sites: 4,
        n: 5,
        update: true,
        ..MicroConfig::default()
    };
    cfg.check().unwrap();
    let island_sites = [0u64..2, 2..4];
    let mut islands = vec![];
    for sites in &island_sites {
        let keys = cfg.keys_of_sites(sites.clone());
        let (island, _) = Island::open(
            IslandConfig::new(CcKind::None, 1),
            &micro::tables(&cfg, keys.end - keys.start),
        )
        .unwrap();
        micro::load(&island, &cfg, keys, true).unwrap();
        islands.push(island);
    }
    // Worker 0 on island 0 (home site 1), worker 1 on island 1 (home site 2).
    let workers = [
        WorkerSpec {
            island: 0,
            cpu: None,
        },
        WorkerSpec {
            island: 1,
            cpu: None,
        },
    ];
    let workload = Micro::new(cfg.clone(), vec![1, 2]).unwrap();
    let dcfg = DriverConfig {
        warmup: Duration::ZERO,
        measure: Duration::from_millis(300),
        display: DisplayMode::Quiet,
        ..DriverConfig::default()
    };
    let report = driver::run_islands(&islands, &workers, Arc::new(workload), &dcfg).unwrap();
    assert_eq!(
        report.user_aborts, 0,
        "a key was routed to an island that does not hold it"
    );
    assert!(
        report.committed > 100,
        "too few commits: {}",
        report.committed
    );
    let total: i64 = island_sites
        .iter()
        .zip(&islands)
        .map(|(s, i)| sum_vals(i, cfg.keys_of_sites(s.clone())))
        .sum();
    // Every measured commit is in the tables (warm-up commits, which the
    // driver does not count, are too), and each adds exactly n.
    let counted = report.committed as i64 * cfg.n as i64;
    assert!(
        total >= counted,
        "table sum {total} is below the {counted} updates counted"
    );
    assert_eq!(total % cfg.n as i64, 0, "a transaction was applied in part");
    // Each island only changed rows of its worker's home site.
    for (i, (sites, island)) in island_sites.iter().zip(&islands).enumerate() {
        let home = [1u64, 2][i];
        for s in sites.clone().filter(|&s| s != home) {
            let (lo, hi) = cfg.site_range(s);
            assert_eq!(
                sum_vals(island, lo..hi),
                0,
                "island {i} changed site {s}, not its home site"
            );
        }
    }
}
