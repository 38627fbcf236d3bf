//! What shaped a database's data: the workload and the parameters its tables and rows
//! depend on, one [`WorkloadSpec`] per island. `islands bench` writes it into each island's
//! log control file (as text, e.g. `micro rows=240000 row_bytes=256 n=10 keys=0..120000`);
//! `islands check` reads it back to rebuild the tables and check the workload's
//! invariants, and `islands bench --resume` compares it with the run it is asked for.
//! Parameters that only shape the requests (a mix, a skew) are not part of it.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use islands::island::Island;
use islands::storage::TableDef;
use islands::Error;

use crate::inserts::{self, InsertsConfig};
use crate::micro::{self, MicroConfig};
use crate::served::{Builtin, TPCC_MAX_ORDERS_PER_DISTRICT};
use crate::tpcc::{self, TpccConfig};
use crate::ycsb::{self, YcsbConfig};

/// See the module documentation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadSpec {
    Tpcc {
        warehouses: u32,
        max_orders_per_district: u32,
    },
    /// `keys`: the island's share of the rows.
    Micro {
        rows: u64,
        row_bytes: usize,
        /// Rows per transaction (the sum of the values is a multiple of it).
        n: usize,
        keys: Range<u64>,
    },
    Ycsb {
        rows: u64,
        row_bytes: usize,
        keys: Range<u64>,
    },
    /// `clients`: the island's client tables.
    Inserts {
        row_bytes: usize,
        rows_per_client: u64,
        clients: usize,
    },
    /// A data set `islands serve --init` loaded (not TPC-C, whose
    /// description is [`WorkloadSpec::Tpcc`]): `served-tpcb scale=4`.
    Served(Builtin),
}

impl fmt::Display for WorkloadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadSpec::Tpcc {
                warehouses,
                max_orders_per_district,
            } => write!(
                f,
                "tpcc warehouses={warehouses} max_orders_per_district={max_orders_per_district}"
            ),
            WorkloadSpec::Micro {
                rows,
                row_bytes,
                n,
                keys,
            } => write!(
                f,
                "micro rows={rows} row_bytes={row_bytes} n={n} keys={}..{}",
                keys.start, keys.end
            ),
            WorkloadSpec::Ycsb {
                rows,
                row_bytes,
                keys,
            } => write!(
                f,
                "ycsb rows={rows} row_bytes={row_bytes} keys={}..{}",
                keys.start, keys.end
            ),
            WorkloadSpec::Inserts {
                row_bytes,
                rows_per_client,
                clients,
            } => write!(
                f,
                "inserts row_bytes={row_bytes} rows_per_client={rows_per_client} clients={clients}"
            ),
            WorkloadSpec::Served(b) => {
                let (key, value) = b.size();
                write!(f, "served-{} {key}={value}", b.name())
            }
        }
    }
}

impl FromStr for WorkloadSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |why: &str| Error::Config(format!("workload description '{s}': {why}"));
        let mut words = s.split_whitespace();
        let name = words.next().ok_or_else(|| bad("empty"))?;
        let mut params = std::collections::BTreeMap::new();
        for w in words {
            let (k, v) = w.split_once('=').ok_or_else(|| bad("expected key=value"))?;
            params.insert(k, v);
        }
        let num = |k: &str| -> Result<u64, Error> {
            params
                .get(k)
                .ok_or_else(|| bad(&format!("no {k}")))?
                .parse()
                .map_err(|_| bad(&format!("{k} is not a number")))
        };
        let range = |k: &str| -> Result<Range<u64>, Error> {
            let v = params.get(k).ok_or_else(|| bad(&format!("no {k}")))?;
            let (a, b) = v
                .split_once("..")
                .ok_or_else(|| bad(&format!("{k} is not a range")))?;
            let (a, b) = (a.parse(), b.parse());
            match (a, b) {
                (Ok(a), Ok(b)) if a < b => Ok(a..b),
                _ => Err(bad(&format!("{k} is not a range"))),
            }
        };
        let small = |k: &str| -> Result<u32, Error> {
            u32::try_from(num(k)?).map_err(|_| bad(&format!("{k} is too large")))
        };
        Ok(match name {
            "tpcc" => WorkloadSpec::Tpcc {
                warehouses: small("warehouses")?,
                max_orders_per_district: small("max_orders_per_district")?,
            },
            "micro" => WorkloadSpec::Micro {
                rows: num("rows")?,
                row_bytes: small("row_bytes")? as usize,
                n: small("n")? as usize,
                keys: range("keys")?,
            },
            "ycsb" => WorkloadSpec::Ycsb {
                rows: num("rows")?,
                row_bytes: small("row_bytes")? as usize,
                keys: range("keys")?,
            },
            "inserts" => WorkloadSpec::Inserts {
                row_bytes: small("row_bytes")? as usize,
                rows_per_client: num("rows_per_client")?,
                clients: small("clients")? as usize,
            },
            "api" => {
                return Err(bad(
                    "the tables of an application's own catalog, which no check knows (a data \
                     directory of `islands serve` records its data set since the server does)",
                ))
            }
            _ => match name.strip_prefix("served-") {
                Some(set) if params.len() == 1 => {
                    let (key, _) = params.iter().next().expect("one parameter");
                    WorkloadSpec::Served(
                        Builtin::with_size(set, key, num(key)?).map_err(|e| bad(&e.to_string()))?,
                    )
                }
                Some(_) => return Err(bad("a served data set has one size parameter")),
                None => return Err(bad("unknown workload")),
            },
        })
    }
}

impl WorkloadSpec {
    /// The workload's name.
    pub fn name(&self) -> &'static str {
        match self {
            WorkloadSpec::Tpcc { .. } => "tpcc",
            WorkloadSpec::Micro { .. } => "micro",
            WorkloadSpec::Ycsb { .. } => "ycsb",
            WorkloadSpec::Inserts { .. } => "inserts",
            WorkloadSpec::Served(b) => b.name(),
        }
    }

    /// The TPC-C configuration of a `tpcc` spec.
    pub fn tpcc(&self) -> Option<TpccConfig> {
        match *self {
            WorkloadSpec::Tpcc {
                warehouses,
                max_orders_per_district,
            } => Some(TpccConfig {
                warehouses,
                max_orders_per_district,
                ..TpccConfig::default()
            }),
            _ => None,
        }
    }

    fn micro(&self) -> Option<MicroConfig> {
        match *self {
            WorkloadSpec::Micro {
                rows, row_bytes, n, ..
            } => Some(MicroConfig {
                rows,
                row_bytes,
                n,
                ..MicroConfig::default()
            }),
            _ => None,
        }
    }

    fn ycsb(&self) -> Option<YcsbConfig> {
        match *self {
            WorkloadSpec::Ycsb {
                rows, row_bytes, ..
            } => Some(YcsbConfig {
                rows,
                row_bytes,
                ..YcsbConfig::silo()
            }),
            _ => None,
        }
    }

    /// Checks the parameters as the workload's own configuration does.
    pub fn check_parameters(&self) -> Result<(), Error> {
        match self {
            WorkloadSpec::Tpcc { .. } => self.tpcc().map_or(Ok(()), |c| c.check()),
            WorkloadSpec::Micro { .. } => self.micro().map_or(Ok(()), |c| c.check()),
            WorkloadSpec::Ycsb { .. } => self.ycsb().map_or(Ok(()), |c| c.check()),
            WorkloadSpec::Inserts {
                row_bytes,
                rows_per_client,
                ..
            } => InsertsConfig {
                row_bytes: *row_bytes,
                rows_per_client: *rows_per_client,
            }
            .check(),
            WorkloadSpec::Served(b) => b.check(),
        }
    }

    /// The island's tables, as the benchmark made them.
    pub fn tables(&self) -> Vec<TableDef> {
        match self {
            WorkloadSpec::Tpcc { .. } => tpcc::schema::tables(&self.tpcc().expect("tpcc")),
            WorkloadSpec::Micro { keys, .. } => {
                micro::tables(&self.micro().expect("micro"), keys.end - keys.start)
            }
            WorkloadSpec::Ycsb { keys, .. } => {
                ycsb::tables(&self.ycsb().expect("ycsb"), keys.end - keys.start)
            }
            WorkloadSpec::Inserts {
                row_bytes,
                rows_per_client,
                clients,
            } => inserts::tables(
                &InsertsConfig {
                    row_bytes: *row_bytes,
                    rows_per_client: *rows_per_client,
                },
                *clients,
            ),
            WorkloadSpec::Served(b) => b.catalog().tables().to_vec(),
        }
    }
}

/// Checks the invariants of the workload that made `islands` (every island of a
/// deployment, or one of them, each with its spec); returns the violations, in words.
pub fn check(islands: &[(&Island, &WorkloadSpec)]) -> Result<Vec<String>, Error> {
    let Some((_, first)) = islands.first() else {
        return Ok(Vec::new());
    };
    if let Some((_, other)) = islands.iter().find(|(_, s)| s.name() != first.name()) {
        return Err(Error::Recovery(format!(
            "the islands hold different workloads: '{first}' and '{other}'"
        )));
    }
    let ranges = || -> Vec<(&Island, Range<u64>)> {
        islands
            .iter()
            .filter_map(|(i, s)| match s {
                WorkloadSpec::Micro { keys, .. } | WorkloadSpec::Ycsb { keys, .. } => {
                    Some((*i, keys.clone()))
                }
                _ => None,
            })
            .collect()
    };
    Ok(match first {
        WorkloadSpec::Tpcc { .. } => {
            let cfg = first.tpcc().expect("tpcc");
            let refs: Vec<Island> = islands.iter().map(|(i, _)| (*i).clone()).collect();
            tpcc::check::check_islands(&refs, &cfg)?
                .iter()
                .map(|v| format!("tpcc: {v}"))
                .collect()
        }
        WorkloadSpec::Micro { n, .. } => micro::check(&ranges(), *n),
        WorkloadSpec::Ycsb { .. } => ycsb::check(&ranges()),
        WorkloadSpec::Inserts { .. } => islands
            .iter()
            .flat_map(|(i, _)| inserts::check(i))
            .collect(),
        // Given every island of the deployment.
        WorkloadSpec::Served(b) => {
            let all: Vec<&Island> = islands.iter().map(|(i, _)| *i).collect();
            b.check_islands(&all, true).violations
        }
    })
}

impl Builtin {
    /// What its islands' control files record as the workload (see
    /// [`islands::api::Options::workload`]), so that `islands check`
    /// rebuilds its tables and checks it: TPC-C's description (`islands
    /// tpcc check` reads it too), or the data set's
    /// ([`WorkloadSpec::Served`]).
    pub fn workload(&self) -> String {
        match *self {
            Builtin::Tpcc { warehouses } => WorkloadSpec::Tpcc {
                warehouses,
                max_orders_per_district: TPCC_MAX_ORDERS_PER_DISTRICT,
            }
            .to_string(),
            b => WorkloadSpec::Served(b).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_read_back_what_they_write() {
        for s in [
            WorkloadSpec::Tpcc {
                warehouses: 2,
                max_orders_per_district: 20_000,
            },
            WorkloadSpec::Micro {
                rows: 1000,
                row_bytes: 64,
                n: 4,
                keys: 500..1000,
            },
            WorkloadSpec::Ycsb {
                rows: 10,
                row_bytes: 16,
                keys: 0..10,
            },
            WorkloadSpec::Inserts {
                row_bytes: 100,
                rows_per_client: 1 << 20,
                clients: 3,
            },
            WorkloadSpec::Served(Builtin::Tpcb { scale: 4 }),
            WorkloadSpec::Served(Builtin::Ycsb { rows: 1000 }),
            WorkloadSpec::Served(Builtin::Micro { rows: 1000 }),
            WorkloadSpec::Served(Builtin::Bank { accounts: 64 }),
        ] {
            assert_eq!(s.to_string().parse::<WorkloadSpec>().unwrap(), s);
            s.check_parameters().unwrap();
        }
        for bad in [
            "",
            "tpcc",
            "micro rows=1 row_bytes=16 n=1 keys=5..5",
            "x a=1",
            "api",
            "served-tpcb rows=4",
            "served-tpcb scale=0",
            "served-bank accounts=64 rows=2",
            "served-nope rows=1",
        ] {
            assert!(bad.parse::<WorkloadSpec>().is_err(), "{bad}");
        }
    }
}
