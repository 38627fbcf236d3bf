//! Described topologies: machines that exist only as a spec, for plans, tests
//! and simulation.
//!
//! - `SxC` (`4x6`: 4 sockets × 6 cores) and `SxCxT` (`2x12x2`: with 2 threads
//!   per core); one NUMA node and one L3 per socket.
//! - `sockets=2,numa=1,l3=1,cores=12,threads=2`: `numa` and `l3` are per
//!   socket, `cores` per L3 domain, `threads` per core; each defaults to 1.
//!
//! CPUs are numbered as Linux does on most x86 servers: the first thread of
//! every core first (socket by socket), then the second threads in the same
//! order, so CPU `c` and CPU `c + cores` are SMT siblings.

use super::{RawCpu, Topology, TopologyError};

/// Bounds a described machine, so a typo cannot ask for a million CPUs.
pub const DESCRIBED_CPUS_MAX: u32 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shape {
    sockets: u32,
    numa: u32,
    l3: u32,
    cores: u32,
    threads: u32,
}

pub(super) fn parse(spec: &str) -> Result<Topology, TopologyError> {
    let shape = parse_shape(spec)?;
    Topology::from_raw(shape.name(), shape.cpus())
}

fn parse_shape(spec: &str) -> Result<Shape, TopologyError> {
    let bad = |part: &str, why: &str| TopologyError::BadSpec {
        spec: spec.to_string(),
        part: part.to_string(),
        why: why.to_string(),
    };
    let trimmed = spec.trim();
    if trimmed.is_empty() {
        return Err(bad(
            "",
            "empty spec; try 4x6 or sockets=2,l3=1,cores=12,threads=2",
        ));
    }
    let mut shape = Shape {
        sockets: 1,
        numa: 1,
        l3: 1,
        cores: 1,
        threads: 1,
    };
    if trimmed.contains('=') {
        let mut seen = Vec::new();
        for part in trimmed.split(',') {
            let part = part.trim();
            let Some((key, value)) = part.split_once('=') else {
                return Err(bad(part, "expected key=value"));
            };
            let key = key.trim();
            let n = count(value).map_err(|why| bad(part, &why))?;
            let slot = match key {
                "sockets" => &mut shape.sockets,
                "numa" => &mut shape.numa,
                "l3" => &mut shape.l3,
                "cores" => &mut shape.cores,
                "threads" => &mut shape.threads,
                _ => {
                    return Err(bad(
                        part,
                        "unknown key; the keys are sockets, numa (per socket), l3 (per socket), cores (per L3), threads (per core)",
                    ))
                }
            };
            if seen.contains(&key) {
                return Err(bad(part, "key given twice"));
            }
            seen.push(key);
            *slot = n;
        }
    } else {
        let parts: Vec<&str> = trimmed.split(['x', 'X', '×']).collect();
        if parts.len() < 2 || parts.len() > 3 {
            return Err(bad(
                trimmed,
                "expected SOCKETSxCORES (4x6), SOCKETSxCORESxTHREADS (2x12x2) or key=value pairs",
            ));
        }
        let n = |p: &str| count(p).map_err(|why| bad(p, &why));
        shape.sockets = n(parts[0])?;
        shape.cores = n(parts[1])?;
        if let Some(t) = parts.get(2) {
            shape.threads = n(t)?;
        }
    }
    // In u128: each count is a u32, so neither product can overflow (in u32,
    // l3=65536,cores=65536 wrapped to 0 cores and divided by zero).
    let cores_per_socket = u128::from(shape.l3) * u128::from(shape.cores);
    let total = u128::from(shape.sockets) * cores_per_socket * u128::from(shape.threads);
    if total > u128::from(DESCRIBED_CPUS_MAX) {
        return Err(bad(
            trimmed,
            &format!("{total} CPUs is more than the limit of {DESCRIBED_CPUS_MAX}"),
        ));
    }
    if cores_per_socket % u128::from(shape.numa) != 0 {
        return Err(bad(
            &format!("numa={}", shape.numa),
            &format!(
                "{cores_per_socket} cores per socket cannot be split evenly into {} NUMA nodes",
                shape.numa
            ),
        ));
    }
    Ok(shape)
}

fn count(s: &str) -> Result<u32, String> {
    let s = s.trim();
    match s.parse::<u32>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) if s.is_empty() => Err("a number is missing".to_string()),
        Err(_) if s.bytes().all(|b| b.is_ascii_digit()) => Err(format!(
            "{s} is too large (at most {DESCRIBED_CPUS_MAX} CPUs in all)"
        )),
        Err(_) => Err(format!("'{s}' is not a positive number")),
    }
}

impl Shape {
    fn name(&self) -> String {
        if self.numa == 1 && self.l3 == 1 {
            if self.threads == 1 {
                format!("{}x{}", self.sockets, self.cores)
            } else {
                format!("{}x{}x{}", self.sockets, self.cores, self.threads)
            }
        } else {
            format!(
                "sockets={},numa={},l3={},cores={},threads={}",
                self.sockets, self.numa, self.l3, self.cores, self.threads
            )
        }
    }

    fn cpus(&self) -> Vec<RawCpu> {
        let cores_per_socket = self.l3 * self.cores;
        let cores_per_node = cores_per_socket / self.numa;
        let total_cores = self.sockets * cores_per_socket;
        let mut out = Vec::with_capacity((total_cores * self.threads) as usize);
        for t in 0..self.threads {
            for s in 0..self.sockets {
                for l in 0..self.l3 {
                    for c in 0..self.cores {
                        let in_socket = l * self.cores + c;
                        let core = s * cores_per_socket + in_socket;
                        out.push(RawCpu {
                            id: t * total_cores + core,
                            package: s,
                            core_key: core,
                            l3_key: Some(s * self.l3 + l),
                            node: Some(s * self.numa + in_socket / cores_per_node),
                            allowed: true,
                        });
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_specs() {
        let t = parse("4x6").unwrap();
        assert_eq!(t.name(), "4x6");
        assert_eq!(t.sockets().len(), 4);
        assert_eq!(t.numa_nodes().len(), 4);
        assert_eq!(t.l3_domains().len(), 4);
        assert_eq!(t.cores().len(), 24);
        assert_eq!(t.cpus().len(), 24);
        assert_eq!(t.sockets()[1].cpus.to_string(), "6-11");
        let t = parse("2x12x2").unwrap();
        assert_eq!(t.cpus().len(), 48);
        assert_eq!(t.cores()[0].cpus.to_string(), "0,24");
        assert_eq!(t.sockets()[1].cpus.to_string(), "12-23,36-47");
        assert_eq!(parse("8×10").unwrap().cores().len(), 80);
    }

    #[test]
    fn key_value_specs() {
        let t = parse("sockets=2,l3=1,cores=12,threads=2").unwrap();
        assert_eq!(t.name(), "2x12x2");
        assert_eq!(t.sockets().len(), 2);
        assert_eq!(t.cores().len(), 24);
        assert_eq!(t.cpus().len(), 48);
        let t = parse("sockets=2, numa=2, l3=4, cores=3").unwrap();
        assert_eq!(t.numa_nodes().len(), 4);
        assert_eq!(t.l3_domains().len(), 8);
        assert_eq!(t.l3_domains()[1].cpus.to_string(), "3-5");
        assert_eq!(t.numa_nodes()[1].cpus.to_string(), "6-11");
        assert_eq!(t.sockets()[0].numa, vec![0, 1]);
        assert_eq!(t.sockets()[1].l3s, vec![4, 5, 6, 7]);
    }

    #[test]
    fn errors_name_the_bad_part() {
        for (spec, part) in [
            ("4x0", "0"),
            ("4xz", "z"),
            ("4", "4"),
            ("1x2x3x4", "1x2x3x4"),
            ("sockets=2,cpus=4", "cpus=4"),
            ("sockets=2,sockets=3", "sockets=3"),
            ("sockets=2,cores", "cores"),
            ("sockets=2,cores=5,numa=2", "numa=2"),
            (
                "sockets=64,cores=64,threads=2",
                "sockets=64,cores=64,threads=2",
            ),
            ("", ""),
            // Products that overflow a u32 (65536 × 65536 wrapped to 0 cores).
            (
                "sockets=1,l3=65536,cores=65536",
                "sockets=1,l3=65536,cores=65536",
            ),
            ("99999999999x1", "99999999999"),
        ] {
            match parse(spec) {
                Err(TopologyError::BadSpec { part: p, .. }) => assert_eq!(p, part, "{spec}"),
                other => panic!("{spec}: expected BadSpec, got {other:?}"),
            }
        }
        let msg = parse("l3=65536,cores=65537").unwrap_err().to_string();
        assert!(msg.contains("4295032832 CPUs"), "the true count: {msg}");
        let msg = parse("99999999999x1").unwrap_err().to_string();
        assert!(msg.contains("too large"), "{msg}");
    }
}
