//! CPU sets and CPU lists in the `numactl` / `taskset -c` syntax.
//!
//! A list is comma-separated items; an item is `N`, `N-M` or `N-M:S` (every
//! S-th CPU from N to M). Formatting compresses to ranges (`0-5,12-17`), so
//! `parse(format(s)) == s` for every set. The empty string is the empty set,
//! because sysfs writes that for a node without CPUs.

use std::fmt;
use std::str::FromStr;

use super::TopologyError;

/// An operating-system CPU number (a hardware thread), as in `/sys/devices/system/cpu/cpuN`.
pub type CpuId = u32;

/// The largest CPU id accepted in a list: keeps a typo like `0-4000000000`
/// from allocating gigabytes. Linux's own limit (`NR_CPUS`) is 8192.
pub const CPU_ID_MAX: CpuId = 65_535;

/// A set of CPU ids. Invariant: `ids` is sorted and has no duplicates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet {
    ids: Vec<CpuId>,
}

impl CpuSet {
    pub fn new() -> CpuSet {
        CpuSet { ids: Vec::new() }
    }

    /// Parses a list such as `0-5,12-17`, `3` or `0-7:2`.
    pub fn parse(list: &str) -> Result<CpuSet, TopologyError> {
        let bad = |part: &str, why: &str| TopologyError::BadCpuList {
            list: list.to_string(),
            part: part.to_string(),
            why: why.to_string(),
        };
        let mut ids = Vec::new();
        let trimmed = list.trim();
        if trimmed.is_empty() {
            return Ok(CpuSet::new());
        }
        for part in trimmed.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(bad(
                    part,
                    "empty item (two commas in a row, or a trailing comma?)",
                ));
            }
            let (range, stride) = match part.split_once(':') {
                Some((r, s)) => {
                    let s: CpuId = parse_id(s).map_err(|why| bad(part, &why))?;
                    if s == 0 {
                        return Err(bad(part, "the stride after ':' must be at least 1"));
                    }
                    (r, s)
                }
                None => (part, 1),
            };
            let (first, last) = match range.split_once('-') {
                Some((a, b)) => (
                    parse_id(a).map_err(|why| bad(part, &why))?,
                    parse_id(b).map_err(|why| bad(part, &why))?,
                ),
                None => {
                    if stride != 1 {
                        return Err(bad(part, "a stride needs a range, as in 0-7:2"));
                    }
                    let id = parse_id(range).map_err(|why| bad(part, &why))?;
                    (id, id)
                }
            };
            if first > last {
                return Err(bad(part, "the range runs backwards"));
            }
            ids.extend((first..=last).step_by(stride as usize));
        }
        Ok(CpuSet::from_ids(ids))
    }

    /// Builds a set from ids in any order, dropping duplicates.
    pub fn from_ids(mut ids: Vec<CpuId>) -> CpuSet {
        ids.sort_unstable();
        ids.dedup();
        CpuSet { ids }
    }

    pub fn ids(&self) -> &[CpuId] {
        &self.ids
    }

    pub fn iter(&self) -> impl Iterator<Item = CpuId> + '_ {
        self.ids.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn contains(&self, cpu: CpuId) -> bool {
        self.ids.binary_search(&cpu).is_ok()
    }

    pub fn first(&self) -> Option<CpuId> {
        self.ids.first().copied()
    }

    pub fn insert(&mut self, cpu: CpuId) {
        if let Err(at) = self.ids.binary_search(&cpu) {
            self.ids.insert(at, cpu);
        }
    }

    pub fn extend(&mut self, other: &CpuSet) {
        self.ids.extend_from_slice(&other.ids);
        self.ids.sort_unstable();
        self.ids.dedup();
    }

    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet {
            ids: self.iter().filter(|c| other.contains(*c)).collect(),
        }
    }

    /// The list in `numactl` syntax, compressed to ranges.
    pub fn to_list(&self) -> String {
        self.to_string()
    }
}

fn parse_id(s: &str) -> Result<CpuId, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("a number is missing".to_string());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{s}' is not a CPU number"));
    }
    match s.parse::<u64>() {
        Ok(n) if n <= u64::from(CPU_ID_MAX) => Ok(n as CpuId),
        _ => Err(format!("CPU {s} is above the limit of {CPU_ID_MAX}")),
    }
}

impl FromStr for CpuSet {
    type Err = TopologyError;
    fn from_str(s: &str) -> Result<CpuSet, TopologyError> {
        CpuSet::parse(s)
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first_item = true;
        while i < self.ids.len() {
            let start = self.ids[i];
            let mut j = i;
            while j + 1 < self.ids.len() && self.ids[j + 1] == self.ids[j] + 1 {
                j += 1;
            }
            if !first_item {
                f.write_str(",")?;
            }
            first_item = false;
            if j == i {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{}", self.ids[j])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

impl FromIterator<CpuId> for CpuSet {
    fn from_iter<I: IntoIterator<Item = CpuId>>(iter: I) -> CpuSet {
        CpuSet::from_ids(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(list: &str) -> Vec<CpuId> {
        CpuSet::parse(list).unwrap().ids().to_vec()
    }

    #[test]
    fn parses_items_ranges_and_strides() {
        assert_eq!(set("3"), vec![3]);
        assert_eq!(
            set("0-5,12-17"),
            vec![0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17]
        );
        assert_eq!(set("0-7:2"), vec![0, 2, 4, 6]);
        assert_eq!(set(" 5, 1-2 ,1 "), vec![1, 2, 5]);
        assert_eq!(set(""), Vec::<CpuId>::new());
        assert_eq!(set("0-1\n"), vec![0, 1], "sysfs files end in a newline");
    }

    #[test]
    fn formats_compressed_ranges() {
        let s = CpuSet::from_ids(vec![17, 0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 9]);
        assert_eq!(s.to_string(), "0-5,9,12-17");
        assert_eq!(CpuSet::from_ids(vec![4]).to_string(), "4");
        assert_eq!(CpuSet::from_ids(vec![1, 2]).to_string(), "1-2");
        assert_eq!(CpuSet::new().to_string(), "");
    }

    #[test]
    fn errors_name_the_bad_item() {
        for (list, part) in [
            ("0-5,a", "a"),
            ("0-5,,7", ""),
            ("5-3", "5-3"),
            ("1-", "1-"),
            ("0-7:0", "0-7:0"),
            ("3:2", "3:2"),
            ("-1", "-1"),
            ("0-99999999999", "0-99999999999"),
            ("0,", ""),
        ] {
            match CpuSet::parse(list) {
                Err(TopologyError::BadCpuList { part: p, .. }) => assert_eq!(p, part, "{list}"),
                other => panic!("{list}: expected an error, got {other:?}"),
            }
        }
        let msg = CpuSet::parse("0-5,x").unwrap_err().to_string();
        assert!(msg.contains("'x'"), "{msg}");
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(ids in proptest::collection::vec(0u32..300, 0..60)) {
            let s = CpuSet::from_ids(ids);
            let back = CpuSet::parse(&s.to_string()).unwrap();
            prop_assert_eq!(back, s);
        }

        #[test]
        fn parse_then_format_is_canonical(a in 0u32..50, len in 0u32..20, b in 70u32..100) {
            let list = format!("{b},{a}-{}", a + len);
            let s = CpuSet::parse(&list).unwrap();
            prop_assert_eq!(s.len() as u32, len + 2);
            prop_assert_eq!(CpuSet::parse(&s.to_string()).unwrap(), s);
        }
    }
}
