//! Sites: the data divided into logical slices (TPC-C warehouses, key ranges),
//! each owned by exactly one island.
//!
//! Both maps here are even range splits: `total` things into `parts`
//! contiguous ranges whose sizes differ by at most one, the first
//! `total % parts` ranges one larger. Lookup is O(1) arithmetic, no table.

use std::ops::Range;

use super::DeployError;
use crate::route::IslandId;

/// `total` items split into `parts` contiguous ranges, sizes differing by ≤ 1.
/// Invariant: `1 <= parts <= total`, so no range is empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvenSplit {
    total: u64,
    parts: u32,
}

impl EvenSplit {
    /// `None` when a range would be empty (`parts == 0` or `parts > total`).
    pub fn new(total: u64, parts: u32) -> Option<EvenSplit> {
        (parts > 0 && u64::from(parts) <= total).then_some(EvenSplit { total, parts })
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn parts(&self) -> u32 {
        self.parts
    }

    fn base(&self) -> u64 {
        self.total / u64::from(self.parts)
    }

    /// The number of ranges that get one extra item.
    fn larger(&self) -> u64 {
        self.total % u64::from(self.parts)
    }

    /// The range of part `i`. Panics if `i >= parts`.
    pub fn range(&self, i: u32) -> Range<u64> {
        assert!(i < self.parts, "part {i} of {}", self.parts);
        let i = u64::from(i);
        let start = i * self.base() + i.min(self.larger());
        let len = self.base() + u64::from(i < self.larger());
        start..start + len
    }

    /// The part owning item `x`. Panics if `x >= total`.
    pub fn part_of(&self, x: u64) -> u32 {
        assert!(x < self.total, "item {x} of {}", self.total);
        let big = self.base() + 1;
        let in_larger = self.larger() * big;
        let part = if x < in_larger {
            x / big
        } else {
            self.larger() + (x - in_larger) / self.base()
        };
        part as u32
    }
}

/// Which island owns which sites: island `i` owns a contiguous range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteMap {
    split: EvenSplit,
}

impl SiteMap {
    pub fn new(sites: u32, islands: u32) -> Result<SiteMap, DeployError> {
        if sites == 0 {
            return Err(DeployError::NoSites);
        }
        if islands == 0 {
            return Err(DeployError::NoIslands);
        }
        if islands > u32::from(IslandId::MAX) + 1 {
            return Err(DeployError::TooManyIslandIds { islands });
        }
        EvenSplit::new(u64::from(sites), islands)
            .map(|split| SiteMap { split })
            .ok_or(DeployError::MoreIslandsThanSites { islands, sites })
    }

    pub fn sites(&self) -> u32 {
        self.split.total as u32
    }

    pub fn islands(&self) -> u32 {
        self.split.parts
    }

    pub fn sites_of(&self, island: IslandId) -> Range<u32> {
        let r = self.split.range(u32::from(island));
        r.start as u32..r.end as u32
    }

    pub fn island_of_site(&self, site: u32) -> IslandId {
        // Below `islands()`, which `new` keeps within island ids.
        self.split.part_of(u64::from(site)) as IslandId
    }
}

/// `keys` keys (0..keys) range-partitioned into sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyPartition {
    split: EvenSplit,
}

/// Range-partitions keys `0..keys` into `sites` sites of sizes differing by ≤ 1.
pub fn partition_keys(keys: u64, sites: u32) -> Result<KeyPartition, DeployError> {
    if sites == 0 {
        return Err(DeployError::NoSites);
    }
    EvenSplit::new(keys, sites)
        .map(|split| KeyPartition { split })
        .ok_or(DeployError::TooFewKeys { keys, sites })
}

impl KeyPartition {
    pub fn keys(&self) -> u64 {
        self.split.total
    }

    pub fn sites(&self) -> u32 {
        self.split.parts
    }

    pub fn keys_of_site(&self, site: u32) -> Range<u64> {
        self.split.range(site)
    }

    pub fn site_of_key(&self, key: u64) -> u32 {
        self.split.part_of(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_split(total: u64, parts: u32) {
        let s = EvenSplit::new(total, parts).unwrap();
        let mut next = 0;
        let (mut min, mut max) = (u64::MAX, 0);
        for i in 0..parts {
            let r = s.range(i);
            assert_eq!(r.start, next, "contiguous");
            assert!(r.end > r.start, "non-empty");
            min = min.min(r.end - r.start);
            max = max.max(r.end - r.start);
            for x in r.clone() {
                assert_eq!(s.part_of(x), i, "item {x} of {total}/{parts}");
            }
            next = r.end;
        }
        assert_eq!(next, total, "every item owned");
        assert!(max - min <= 1, "sizes {min}..{max}");
    }

    #[test]
    fn every_site_owned_once_contiguous_and_even() {
        for total in 1..40u64 {
            for parts in 1..=total as u32 {
                check_split(total, parts);
            }
        }
        check_split(240, 24);
        check_split(240, 7);
    }

    #[test]
    fn site_map_and_its_errors() {
        let m = SiteMap::new(10, 4).unwrap();
        let ranges: Vec<Range<u32>> = (0..4).map(|i| m.sites_of(i)).collect();
        assert_eq!(ranges, [0..3, 3..6, 6..8, 8..10]);
        assert_eq!(m.island_of_site(5), 1);
        assert_eq!(m.island_of_site(9), 3);
        assert_eq!(SiteMap::new(0, 4), Err(DeployError::NoSites));
        assert_eq!(
            SiteMap::new(3, 4),
            Err(DeployError::MoreIslandsThanSites {
                islands: 4,
                sites: 3
            })
        );
        assert_eq!(SiteMap::new(3, 0), Err(DeployError::NoIslands));
        // Island ids are 16 bits: the last id is 65535, and one island more is refused.
        let m = SiteMap::new(70_000, 65_536).unwrap();
        assert_eq!(m.island_of_site(69_999), 65_535);
        assert_eq!(m.sites_of(65_535), 69_999..70_000);
        assert_eq!(
            SiteMap::new(70_000, 65_537),
            Err(DeployError::TooManyIslandIds { islands: 65_537 })
        );
    }

    #[test]
    fn keys_into_sites() {
        let p = partition_keys(240_000, 24).unwrap();
        assert_eq!(p.keys_of_site(0), 0..10_000);
        assert_eq!(p.site_of_key(239_999), 23);
        assert_eq!(p.site_of_key(10_000), 1);
        assert!(partition_keys(3, 4).is_err());
        assert!(partition_keys(3, 0).is_err());
    }

    proptest! {
        #[test]
        fn part_of_inverts_range(total in 1u64..1_000_000, parts in 1u32..500, pick in 0u64..1_000_000) {
            prop_assume!(u64::from(parts) <= total);
            let s = EvenSplit::new(total, parts).unwrap();
            let x = pick % total;
            let p = s.part_of(x);
            prop_assert!(s.range(p).contains(&x));
        }
    }
}
