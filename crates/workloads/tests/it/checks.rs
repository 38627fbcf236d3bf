//! The invariants `islands check` tests (see `spec::check`) hold after a run and catch
//! what they are for: a row missing, a row whose check word does not fit its counter, a
//! transaction applied in part, an insert missing before one that is present.

use std::sync::Arc;
use std::time::Duration;

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands_bench::driver::{self, DriverConfig, WorkerSpec};
use islands_bench::progress::DisplayMode;
use islands_workloads::inserts::{self, Inserts, InsertsConfig};
use islands_workloads::micro::{self, Micro, MicroConfig};
use islands_workloads::spec::{check, WorkloadSpec};
use islands_workloads::ycsb::{self, Ycsb, YcsbConfig};

fn run<W: islands::proc::Workload + 'static>(island: &Island, w: W) {
    let dcfg = DriverConfig {
        warmup: Duration::ZERO,
        measure: Duration::from_millis(150),
        display: DisplayMode::Quiet,
        pin: false,
        ..DriverConfig::default()
    };
    driver::run_islands(
        std::slice::from_ref(island),
        &[WorkerSpec {
            island: 0,
            cpu: None,
        }],
        Arc::new(w),
        &dcfg,
    )
    .unwrap();
}

fn open(tables: &[islands::storage::TableDef]) -> Island {
    Island::open(IslandConfig::new(CcKind::None, 1), tables)
        .unwrap()
        .0
}

/// Overwrites row `key` of table 0 with its first two words set to `a` and `b`.
fn put(island: &Island, key: u64, a: u64, b: u64) {
    island
        .loader()
        .unwrap()
        .put(0, key, |r| {
            r.set_u64(islands::storage::Col(0), a);
            r.set_u64(islands::storage::Col(1), b);
        })
        .unwrap();
}

fn violations(island: &Island, spec: &WorkloadSpec) -> Vec<String> {
    check(&[(island, spec)]).unwrap()
}

#[test]
fn micro_invariants_hold_and_catch_bad_rows_and_partial_transactions() {
    let cfg = MicroConfig {
        rows: 200,
        row_bytes: 64,
        n: 4,
        update: true,
        ..MicroConfig::default()
    };
    let spec = WorkloadSpec::Micro {
        rows: 200,
        row_bytes: 64,
        n: 4,
        keys: 0..200,
    };
    let island = open(&micro::tables(&cfg, 200));
    micro::load(&island, &cfg, 0..200, true).unwrap();
    run(&island, Micro::new(cfg, vec![0]).unwrap());
    assert_eq!(violations(&island, &spec), Vec::<String>::new());
    let value = |k: u64| {
        let mut v = 0;
        island
            .catalog()
            .table(0)
            .for_each_row(|key, _, w| v = if key == k { w[0] } else { v });
        v
    };
    // One row one update further, with its check word: a transaction applied in part.
    let v = value(7) + 1;
    put(&island, 7, v, islands_workloads::row_check(7, v));
    let found = violations(&island, &spec);
    assert!(
        found.len() == 1 && found[0].contains("applied in part"),
        "{found:?}"
    );
    // Its value without its check word.
    put(&island, 7, v + 3, islands_workloads::row_check(7, v));
    let found = violations(&island, &spec);
    assert!(found.iter().any(|f| f.contains("row 7")), "{found:?}");
    // A row gone.
    put(&island, 7, v - 1, islands_workloads::row_check(7, v - 1));
    island
        .catalog()
        .table(0)
        .delete_direct(&mut Default::default(), 9);
    let found = violations(&island, &spec);
    assert!(
        found.iter().any(|f| f.contains("199 of the 200 rows")),
        "{found:?}"
    );
}

#[test]
fn ycsb_invariants_hold_and_catch_a_stale_check_word() {
    let cfg = YcsbConfig {
        rows: 300,
        row_bytes: 16,
        ops: 4,
        read_pct: 50,
        ..YcsbConfig::silo()
    };
    let spec = WorkloadSpec::Ycsb {
        rows: 300,
        row_bytes: 16,
        keys: 0..300,
    };
    let island = open(&ycsb::tables(&cfg, 300));
    ycsb::load(&island, &cfg, 0..300, true).unwrap();
    run(&island, Ycsb::new(cfg).unwrap());
    assert_eq!(violations(&island, &spec), Vec::<String>::new());
    // A counter one update ahead of its check word.
    put(&island, 3, 10, islands_workloads::row_check(3, 9));
    let found = violations(&island, &spec);
    assert!(found.len() == 1 && found[0].contains("row 3"), "{found:?}");
}

#[test]
fn inserts_invariant_holds_and_catches_a_hole() {
    let cfg = InsertsConfig {
        row_bytes: 32,
        rows_per_client: 1 << 20,
    };
    let spec = WorkloadSpec::Inserts {
        row_bytes: 32,
        rows_per_client: 1 << 20,
        clients: 1,
    };
    let island = open(&inserts::tables(&cfg, 1));
    run(&island, Inserts::new(cfg, vec![0]).unwrap());
    assert_eq!(violations(&island, &spec), Vec::<String>::new());
    let n = island.catalog().table(0).count_rows();
    assert!(n > 10);
    island
        .catalog()
        .table(0)
        .delete_direct(&mut Default::default(), n / 2);
    let found = violations(&island, &spec);
    assert!(
        found.len() == 1
            && found[0].contains("1 insert(s) before the last one present are missing"),
        "{found:?}"
    );
}
