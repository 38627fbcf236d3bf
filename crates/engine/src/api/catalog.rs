//! The catalog an application opens a deployment with: its tables, how
//! each is partitioned over the islands, and its stored procedures.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::value::{Args, Row, Type, Value};
use super::CallError;
use crate::storage::{SecondaryId, TableDef, TableId};
use crate::txn::Txn;
use crate::Abort;

/// What a procedure's body returns: the transaction's work, run by the
/// home island's executor. It may suspend only on remote rows.
pub type ProcFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Abort>> + 'a>>;

/// A procedure's body: runs against the transaction `tx` with the checked
/// arguments, and pushes its result rows to `out` (cleared before every
/// attempt: an aborted attempt's rows are not returned).
pub type ProcBody =
    Arc<dyn for<'a> Fn(&'a mut Txn, &'a Args, &'a mut Vec<Row>) -> ProcFuture<'a> + Send + Sync>;

/// How a procedure's home island (the island whose executor runs it and
/// coordinates its commit) is chosen for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Home {
    /// The island holding key `args[param]` of `table` (the partitioning
    /// parameter: TPC-C's `w_id`). The parameter is an integer, or an
    /// array of them whose first element is the key (a batch of keys that
    /// starts on its home site; an empty array counts as key 0).
    Key { param: usize, table: TableId },
    /// Any island: calls are spread over them.
    Any,
}

/// The site of a key (a row's primary key, or a secondary index's key).
pub type SiteOf = fn(u64) -> u32;

/// How a table's rows are spread over the islands.
#[derive(Clone, Copy, Debug)]
pub enum Partition {
    /// Row `key` lives on the island holding site `site(key)` (sites past
    /// the deployment's last wrap around: `site(key) % sites`).
    BySite(SiteOf),
    /// Keys `0..keys` split into the deployment's sites as contiguous
    /// ranges whose sizes differ by at most one (the paper's
    /// microbenchmark); a key past the end belongs to the last site.
    Range { keys: u64 },
    /// Every island holds every row; transactions read it locally and the
    /// application keeps the copies equal (TPC-C's ITEM).
    Replicated,
}

/// A stored procedure: a name, typed parameters, typed result columns, a
/// home, and a body.
#[derive(Clone)]
pub struct ProcDef {
    pub(crate) name: String,
    pub(crate) params: Vec<(String, Type)>,
    pub(crate) columns: Vec<(String, Type)>,
    pub(crate) home: Home,
    pub(crate) body: ProcBody,
}

impl ProcDef {
    /// A procedure named `name` whose home is any island, without
    /// parameters or result columns yet.
    pub fn new(
        name: &str,
        body: impl for<'a> Fn(&'a mut Txn, &'a Args, &'a mut Vec<Row>) -> ProcFuture<'a>
            + Send
            + Sync
            + 'static,
    ) -> ProcDef {
        ProcDef {
            name: name.to_string(),
            params: Vec::new(),
            columns: Vec::new(),
            home: Home::Any,
            body: Arc::new(body),
        }
    }

    /// Adds a parameter.
    pub fn param(mut self, name: &str, ty: Type) -> ProcDef {
        self.params.push((name.to_string(), ty));
        self
    }

    /// Adds a result column.
    pub fn column(mut self, name: &str, ty: Type) -> ProcDef {
        self.columns.push((name.to_string(), ty));
        self
    }

    /// Runs it on the island holding key `args[param]` of `table`.
    pub fn home_by(mut self, param: usize, table: TableId) -> ProcDef {
        self.home = Home::Key { param, table };
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn params(&self) -> &[(String, Type)] {
        &self.params
    }

    pub fn columns(&self) -> &[(String, Type)] {
        &self.columns
    }

    pub fn home(&self) -> Home {
        self.home
    }

    /// Checks `args` against the parameters: their number, each type, no nulls.
    pub(crate) fn check_args(&self, args: &[Value]) -> Result<(), CallError> {
        let bad = |why: String| CallError::BadArguments {
            procedure: self.name.clone(),
            why,
        };
        if args.len() != self.params.len() {
            return Err(bad(format!(
                "{} argument(s) given, it takes {} ({})",
                args.len(),
                self.params.len(),
                self.signature()
            )));
        }
        for (i, (v, (name, ty))) in args.iter().zip(&self.params).enumerate() {
            match v.type_of() {
                None => {
                    return Err(bad(format!(
                        "argument {} ({name}) is null; parameters are not nullable",
                        i + 1
                    )))
                }
                Some(t) if t != *ty => {
                    return Err(bad(format!(
                        "argument {} ({name}) is {t} {v}, the parameter is {ty}",
                        i + 1
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Checks result rows against the declared columns (nulls allowed).
    pub(crate) fn check_rows(&self, rows: &[Row]) -> Result<(), String> {
        for (r, row) in rows.iter().enumerate() {
            if row.len() != self.columns.len() {
                return Err(format!(
                    "result row {} has {} value(s), the procedure declares {} column(s)",
                    r + 1,
                    row.len(),
                    self.columns.len()
                ));
            }
            for (v, (name, ty)) in row.iter().zip(&self.columns) {
                if let Some(t) = v.type_of() {
                    if t != *ty {
                        return Err(format!(
                            "result row {}: column {name} is declared {ty}, the value is {t} {v}",
                            r + 1
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// `name(p1 int, p2 string)`.
    pub fn signature(&self) -> String {
        let ps: Vec<String> = self
            .params
            .iter()
            .map(|(n, t)| format!("{n} {t}"))
            .collect();
        format!("{}({})", self.name, ps.join(", "))
    }
}

impl std::fmt::Debug for ProcDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcDef")
            .field("signature", &self.signature())
            .field("columns", &self.columns)
            .field("home", &self.home)
            .finish()
    }
}

/// Tables, their partitioning, and procedures: what a deployment serves.
#[derive(Clone, Default)]
pub struct Catalog {
    pub(crate) tables: Vec<TableDef>,
    pub(crate) partitions: Vec<Partition>,
    pub(crate) procs: Vec<ProcDef>,
    pub(crate) by_name: HashMap<String, u32>,
    /// Where the rows of a secondary key live (see [`Catalog::secondary_by_site`]).
    pub(crate) secondary_sites: Vec<(TableId, SecondaryId, SiteOf)>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables: Vec<&str> = self.tables.iter().map(|t| t.name.as_str()).collect();
        let procs: Vec<String> = self.procs.iter().map(ProcDef::signature).collect();
        f.debug_struct("Catalog")
            .field("tables", &tables)
            .field("procedures", &procs)
            .finish()
    }
}

impl Catalog {
    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// Adds a table; its id is its position (0, 1, …).
    pub fn table(&mut self, def: TableDef, partition: Partition) -> TableId {
        self.tables.push(def);
        self.partitions.push(partition);
        (self.tables.len() - 1) as TableId
    }

    /// Declares that the rows whose key in secondary index `index` of
    /// `table` is `skey` all live on the island of site `site(skey)` (sites
    /// wrap as in [`Partition::BySite`]), so that a scan of that key runs
    /// there: TPC-C's customers by last name live with their district's
    /// warehouse. Without it, a secondary scan reads the calling island's
    /// rows only, which is right for a replicated table alone.
    pub fn secondary_by_site(
        &mut self,
        table: TableId,
        index: SecondaryId,
        site: SiteOf,
    ) -> Result<(), crate::Error> {
        let Some(def) = self.tables.get(table as usize) else {
            return Err(crate::Error::Config(format!(
                "secondary_by_site: table {table} is not in the catalog (add tables first)"
            )));
        };
        if index.0 as usize >= def.secondary.len() {
            return Err(crate::Error::Config(format!(
                "secondary_by_site: table {} has {} secondary index(es), not index {}",
                def.name,
                def.secondary.len(),
                index.0
            )));
        }
        if matches!(self.partitions[table as usize], Partition::Replicated) {
            return Err(crate::Error::Config(format!(
                "secondary_by_site: table {} is replicated: every island holds its rows",
                def.name
            )));
        }
        if self
            .secondary_sites
            .iter()
            .any(|&(t, i, _)| t == table && i == index)
        {
            return Err(crate::Error::Config(format!(
                "secondary_by_site: index {} of table {} is placed twice",
                index.0, def.name
            )));
        }
        self.secondary_sites.push((table, index, site));
        Ok(())
    }

    /// Adds a procedure. A second procedure of the same name, or a home
    /// that names a parameter it lacks, is refused.
    pub fn procedure(&mut self, def: ProcDef) -> Result<(), crate::Error> {
        if self.by_name.contains_key(&def.name) {
            return Err(crate::Error::Config(format!(
                "procedure {} is defined twice",
                def.name
            )));
        }
        if let Home::Key { param, table } = def.home {
            match def.params.get(param) {
                Some((_, Type::Int | Type::Ints)) => {}
                Some((n, t)) => {
                    return Err(crate::Error::Config(format!(
                        "procedure {}: its home parameter {n} is {t}; a partitioning parameter is an int or an int[]",
                        def.name
                    )))
                }
                None => {
                    return Err(crate::Error::Config(format!(
                        "procedure {}: its home is parameter {param}, and it has {} parameter(s)",
                        def.name,
                        def.params.len()
                    )))
                }
            }
            if table as usize >= self.tables.len() {
                return Err(crate::Error::Config(format!(
                    "procedure {}: its home table {table} is not in the catalog (add tables first)",
                    def.name
                )));
            }
        }
        self.by_name
            .insert(def.name.clone(), self.procs.len() as u32);
        self.procs.push(def);
        Ok(())
    }

    pub fn tables(&self) -> &[TableDef] {
        &self.tables
    }

    pub fn procedures(&self) -> &[ProcDef] {
        &self.procs
    }

    /// The procedure called `name`.
    pub fn lookup(&self, name: &str) -> Option<(u32, &ProcDef)> {
        let id = *self.by_name.get(name)?;
        Some((id, &self.procs[id as usize]))
    }
}
