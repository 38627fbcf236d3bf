//! Helpers shared by the integration tests.

use islands::cc::CcKind;
use islands::island::{Island, IslandConfig};
use islands::storage::{Col, ColType, PrimaryKind, TableDef};

pub const ALL_CC: [CcKind; 4] = [CcKind::None, CcKind::NoWait, CcKind::WaitDie, CcKind::Occ];

/// Accounts table: key = account number, one balance column.
pub fn accounts(capacity: u64) -> TableDef {
    TableDef::new(
        "accounts",
        &[("balance", ColType::I64), ("pad", ColType::Str(24))],
        capacity,
        PrimaryKind::Hash,
    )
}

pub const BALANCE: Col = Col(0);

pub fn open_bank(cc: CcKind, workers: usize, accounts_n: u64, initial: i64) -> Island {
    let (island, _) = Island::open(
        IslandConfig::new(cc, workers),
        &[self::accounts(accounts_n * 2)],
    )
    .unwrap();
    {
        let mut l = island.loader().unwrap();
        for k in 0..accounts_n {
            l.put(0, k, |r| r.set_i64(BALANCE, initial)).unwrap();
        }
    }
    island
}

/// A unique empty directory under the system temp dir.
#[allow(dead_code)]
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("islands-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
