//! The catalog an application opens a deployment with: its tables, how
//! each is partitioned over the islands, and its stored procedures.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::value::{Args, Row, Type, Value};
use super::CallError;
use crate::storage::schema::SqlType;
use crate::storage::{Col, RowMut, SecondaryId, TableDef, TableId};
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
    /// Each table's SQL view (`None`: the default of [`SqlTable::default_for`]).
    pub(crate) sql: Vec<Option<Arc<SqlTable>>>,
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
        self.sql.push(None);
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

    /// Gives `table` its SQL view: the names and types its columns show to
    /// SQL statements, and how its primary key packs from key columns.
    /// Checked against the table: every stored column it names exists with
    /// a type the SQL type fits, key parts do not overlap and go from the
    /// most significant bits down, a secondary index it names exists.
    pub fn sql(&mut self, table: TableId, mut view: SqlTable) -> Result<(), crate::Error> {
        let Some(def) = self.tables.get(table as usize) else {
            return Err(crate::Error::Config(format!(
                "sql: table {table} is not in the catalog (add tables first)"
            )));
        };
        let bad = |why: String| crate::Error::Config(format!("sql view of {}: {why}", def.name));
        let resolve = |name: &str, ty: SqlType| -> Result<Col, crate::Error> {
            let i = def
                .columns
                .iter()
                .position(|(n, _)| n == name)
                .ok_or_else(|| bad(format!("no stored column {name}")))?;
            if !ty.fits(def.columns[i].1) {
                return Err(bad(format!(
                    "column {name} is stored as {:?}, which cannot show as {}",
                    def.columns[i].1,
                    ty.name()
                )));
            }
            Ok(Col(i as u16))
        };
        let mut low = 64u32;
        for p in &mut view.key {
            let top = u32::from(p.shift) + u32::from(p.bits);
            if p.bits == 0 || top > low {
                return Err(bad(format!(
                    "key part {} (bits {}..{top}) overlaps the part before it or leaves 64 bits",
                    p.name, p.shift
                )));
            }
            low = u32::from(p.shift);
            if let Some(name) = &p.stored_name {
                p.stored = Some(resolve(name, p.ty)?);
            }
        }
        let mut names = std::collections::HashSet::new();
        for c in &mut view.columns {
            if !names.insert(c.name.clone()) {
                return Err(bad(format!("column {} is declared twice", c.name)));
            }
            if let SqlSource::Stored(_) = c.source {
                let name = c.stored_name.clone().unwrap_or_else(|| c.name.clone());
                c.source = SqlSource::Stored(resolve(&name, c.ty)?);
            }
        }
        for s in &view.secondary {
            if s.index.0 as usize >= def.secondary.len() {
                return Err(bad(format!("no secondary index {}", s.index.0)));
            }
            for name in &s.columns {
                if !view.columns.iter().any(|c| &c.name == name) {
                    return Err(bad(format!("secondary key column {name} is not a column")));
                }
            }
        }
        if let Some(d) = view.domain {
            if d.0 > d.1 {
                return Err(bad(format!("empty key domain {}..={}", d.0, d.1)));
            }
        }
        self.sql[table as usize] = Some(Arc::new(view));
        Ok(())
    }

    /// The SQL view of `table`: the one given by [`Catalog::sql`], or the
    /// default of [`SqlTable::default_for`].
    pub fn sql_view(&self, table: TableId) -> Option<Arc<SqlTable>> {
        let def = self.tables.get(table as usize)?;
        Some(match &self.sql[table as usize] {
            Some(v) => v.clone(),
            None => Arc::new(SqlTable::default_for(
                def,
                matches!(self.partitions[table as usize], Partition::Replicated),
            )),
        })
    }

    /// The table named `name` (its SQL name: the table's name).
    pub fn table_named(&self, name: &str) -> Option<TableId> {
        self.tables
            .iter()
            .position(|t| t.name == name)
            .map(|i| i as TableId)
    }

    /// Whether the rows of secondary index `index` of `table` are placed by
    /// [`Catalog::secondary_by_site`], or every island holds them all.
    pub fn secondary_is_routed(&self, table: TableId, index: SecondaryId) -> bool {
        matches!(self.partitions[table as usize], Partition::Replicated)
            || self
                .secondary_sites
                .iter()
                .any(|&(t, i, _)| t == table && i == index)
    }

    pub fn tables(&self) -> &[TableDef] {
        &self.tables
    }

    pub fn procedures(&self) -> &[ProcDef] {
        &self.procs
    }

    /// A fingerprint of what processes of one deployment must agree on beyond
    /// the tables' schema: how each table is partitioned, and each
    /// procedure's name, parameters, result columns and home, in order. Not
    /// the procedures' code, which no fingerprint can see.
    pub fn fingerprint(&self) -> u64 {
        let mut text = crate::storage::schema_fingerprint(&self.tables).to_string();
        for p in &self.partitions {
            text.push_str(match p {
                Partition::BySite(_) => " by-site",
                Partition::Range { .. } => " range",
                Partition::Replicated => " replicated",
            });
            if let Partition::Range { keys } = p {
                text.push_str(&format!(" {keys}"));
            }
        }
        for p in &self.procs {
            text.push_str(&format!(
                "\nproc {} {:?} -> {:?} home {:?}",
                p.name, p.params, p.columns, p.home
            ));
        }
        crate::storage::fnv1a(text.as_bytes())
    }

    /// The procedure called `name`.
    pub fn lookup(&self, name: &str) -> Option<(u32, &ProcDef)> {
        let id = *self.by_name.get(name)?;
        Some((id, &self.procs[id as usize]))
    }
}

// ---- SQL views --------------------------------------------------------------

/// What an INSERT into a table without a primary key of its own (pgbench's
/// history) calls to allocate the row's key: given the row's values in the
/// view's column order, it returns a key no row holds, with whatever it
/// must change to keep the data set's invariants (a branch's history count).
pub type KeyAllocFn = Arc<
    dyn for<'a> Fn(
            &'a mut Txn,
            &'a [Value],
        ) -> Pin<Box<dyn Future<Output = Result<u64, Abort>> + 'a>>
        + Send
        + Sync,
>;

/// The key allocation of a keyless table: the hook, and the table and
/// column (by position in the view) whose value decides the row's island.
#[derive(Clone)]
pub struct KeyAlloc {
    pub alloc: KeyAllocFn,
    pub home_table: TableId,
    pub home_column: usize,
}

/// One part of a table's 64-bit primary key: a key column of the view,
/// whose value `v` (`0 <= v < 2^bits`) sits at bits `shift..shift + bits`.
/// A part may also be stored in a column of the row (TPC-C's `W_ID`), which
/// an INSERT sets from the key.
#[derive(Clone, Debug)]
pub struct KeyPart {
    pub name: String,
    pub ty: SqlType,
    pub shift: u8,
    pub bits: u8,
    pub(crate) stored_name: Option<String>,
    pub(crate) stored: Option<Col>,
    /// Not a column of the view (a keyless table's allocated key).
    pub hidden: bool,
}

impl KeyPart {
    /// The largest value the part holds.
    pub fn max(&self) -> u64 {
        if self.bits >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bits) - 1
        }
    }
}

/// Where a column of a view takes its value from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlSource {
    /// Key part `i` of the row's primary key.
    Key(usize),
    /// A stored column of the row.
    Stored(Col),
}

/// A column of a view: its SQL name and type, and where its value lives.
#[derive(Clone, Debug)]
pub struct SqlColumn {
    pub name: String,
    pub ty: SqlType,
    pub source: SqlSource,
    pub(crate) stored_name: Option<String>,
}

/// A secondary index SQL may look rows up by: equality on `columns` (of
/// the view), whose values `pack` turns into the index's key. The rows it
/// finds are filtered by those columns again, so a hashed key is exact.
#[derive(Clone, Debug)]
pub struct SqlSecondary {
    pub index: SecondaryId,
    pub columns: Vec<String>,
    pub pack: fn(&[Value]) -> Option<u64>,
}

/// How a table shows to SQL: its columns (key columns among them), how
/// the key packs, which key prefix keeps rows on one island, the keys it
/// may hold, and hooks that keep the data set's invariants.
#[derive(Clone, Default)]
pub struct SqlTable {
    pub(crate) key: Vec<KeyPart>,
    pub(crate) columns: Vec<SqlColumn>,
    pub(crate) local_prefix: Option<usize>,
    pub(crate) domain: Option<(u64, u64)>,
    pub(crate) alloc: Option<KeyAlloc>,
    pub(crate) on_write: Option<fn(u64, &mut RowMut)>,
    pub(crate) secondary: Vec<SqlSecondary>,
}

impl std::fmt::Debug for SqlTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTable")
            .field("key", &self.key)
            .field("columns", &self.columns)
            .field("local_prefix", &self.local_prefix)
            .field("domain", &self.domain)
            .field("keyless", &self.alloc.is_some())
            .finish()
    }
}

impl SqlTable {
    /// A view without columns yet.
    pub fn new() -> SqlTable {
        SqlTable::default()
    }

    /// The view a table has unless given one: a key column `key` (the whole
    /// 64-bit key, `int8`), then each stored column under its own name,
    /// lowercased, with its default SQL type. Ranges and whole-table reads
    /// are local only on a replicated table.
    pub fn default_for(def: &TableDef, replicated: bool) -> SqlTable {
        let mut v = SqlTable::new().key_column("key", SqlType::Int8, 0, 63);
        for (i, (name, ty)) in def.columns.iter().enumerate() {
            v.columns.push(SqlColumn {
                name: name.to_lowercase(),
                ty: SqlType::of(*ty),
                source: SqlSource::Stored(Col(i as u16)),
                stored_name: Some(name.clone()),
            });
        }
        v.local_prefix = replicated.then_some(0);
        v
    }

    /// Adds a key part shown as column `name` (parts go from the most
    /// significant bits down: the first part added is the leftmost).
    pub fn key_column(mut self, name: &str, ty: SqlType, shift: u8, bits: u8) -> SqlTable {
        self.columns.push(SqlColumn {
            name: name.into(),
            ty,
            source: SqlSource::Key(self.key.len()),
            stored_name: None,
        });
        self.key.push(KeyPart {
            name: name.into(),
            ty,
            shift,
            bits,
            stored_name: None,
            stored: None,
            hidden: false,
        });
        self
    }

    /// As [`SqlTable::key_column`], for a part also stored in column
    /// `stored` of the row (read from the key, written by an INSERT).
    pub fn key_column_stored(
        mut self,
        name: &str,
        ty: SqlType,
        shift: u8,
        bits: u8,
        stored: &str,
    ) -> SqlTable {
        self = self.key_column(name, ty, shift, bits);
        if let Some(p) = self.key.last_mut() {
            p.stored_name = Some(stored.into());
        }
        self
    }

    /// Adds a key part that is no column (a keyless table's allocated key,
    /// of which SQL sees nothing).
    pub fn hidden_key(mut self, name: &str, shift: u8, bits: u8) -> SqlTable {
        self.key.push(KeyPart {
            name: name.into(),
            ty: SqlType::Int8,
            shift,
            bits,
            stored_name: None,
            stored: None,
            hidden: true,
        });
        self
    }

    /// Adds column `name` of SQL type `ty`, stored in column `stored`.
    pub fn column(mut self, name: &str, ty: SqlType, stored: &str) -> SqlTable {
        self.columns.push(SqlColumn {
            name: name.into(),
            ty,
            source: SqlSource::Stored(Col(0)),
            stored_name: Some(stored.into()),
        });
        self
    }

    /// Rows whose keys agree on the first `n` key parts live on one island
    /// (TPC-C: `n = 1`, the warehouse); 0: every island holds every row.
    pub fn local_prefix(mut self, n: usize) -> SqlTable {
        self.local_prefix = Some(n);
        self
    }

    /// The values the first key part takes, `lo..=hi` (pgbench's account
    /// ids `1..=100000 * scale`): a read of the whole table reads these, and
    /// an INSERT of a key outside them is refused.
    pub fn domain(mut self, lo: u64, hi: u64) -> SqlTable {
        self.domain = Some((lo, hi));
        self
    }

    /// The table has no key of its own: an INSERT calls `alloc` for one,
    /// and the row's island is that of key `row[home_column]` of `home_table`.
    pub fn keyless(
        mut self,
        home_table: TableId,
        home_column: usize,
        alloc: impl for<'a> Fn(
                &'a mut Txn,
                &'a [Value],
            ) -> Pin<Box<dyn Future<Output = Result<u64, Abort>> + 'a>>
            + Send
            + Sync
            + 'static,
    ) -> SqlTable {
        self.alloc = Some(KeyAlloc {
            alloc: Arc::new(alloc),
            home_table,
            home_column,
        });
        self
    }

    /// After every SQL write to a row, `f(key, row)` runs: it keeps words
    /// SQL does not show (a check word) right.
    pub fn on_write(mut self, f: fn(u64, &mut RowMut)) -> SqlTable {
        self.on_write = Some(f);
        self
    }

    /// Rows may be found by equality on `columns` through secondary index
    /// `index`, whose key `pack` makes from their values.
    pub fn secondary(
        mut self,
        index: SecondaryId,
        columns: &[&str],
        pack: fn(&[Value]) -> Option<u64>,
    ) -> SqlTable {
        self.secondary.push(SqlSecondary {
            index,
            columns: columns.iter().map(|c| (*c).to_string()).collect(),
            pack,
        });
        self
    }

    /// Puts the columns in the order of `names` (those it does not name last).
    pub fn column_order(mut self, names: &[&str]) -> SqlTable {
        self.columns.sort_by_key(|c| {
            names
                .iter()
                .position(|n| *n == c.name)
                .unwrap_or(usize::MAX)
        });
        self
    }

    /// Adds the stored columns of `other` (its key columns are left out).
    pub fn columns_of(mut self, other: &SqlTable) -> SqlTable {
        for c in &other.columns {
            if let SqlSource::Stored(_) = c.source {
                self.columns.push(c.clone());
            }
        }
        self
    }

    pub fn columns(&self) -> &[SqlColumn] {
        &self.columns
    }

    pub fn key(&self) -> &[KeyPart] {
        &self.key
    }

    /// Whether an INSERT allocates the key ([`SqlTable::keyless`]).
    pub fn is_keyless(&self) -> bool {
        self.alloc.is_some()
    }
}

/// Messages of the user aborts a SQL statement on tables ends with; a
/// server answers each with its SQLSTATE ([`sql_abort_state`]). Hooks of
/// data sets ([`SqlTable::keyless`]) use them too.
pub mod sql_abort {
    pub const DUPLICATE_KEY: &str = "duplicate key value violates the primary key";
    pub const FOREIGN_KEY: &str =
        "insert violates a foreign key: the row it refers to does not exist";
    pub const NOT_NULL: &str = "null value in a column that is not nullable";
    pub const CHECK: &str = "the key is outside the keys this table holds";
    pub const DIVISION_BY_ZERO: &str = "division by zero";
    pub const TOO_LONG: &str = "value too long for its column";
    pub const BAD_TIMESTAMP: &str = "invalid input syntax for type timestamp";
    pub const PARAM_TYPE: &str = "a parameter's value does not have the parameter's type";
    pub const FIXED_KEYS: &str = "rows of this table are only updated: its keys are fixed";
}

/// The SQLSTATE of a user abort whose message is one of [`sql_abort`]'s.
pub fn sql_abort_state(why: &str) -> Option<&'static str> {
    use sql_abort::*;
    Some(match why {
        DUPLICATE_KEY => "23505",
        FOREIGN_KEY => "23503",
        NOT_NULL => "23502",
        CHECK => "23514",
        DIVISION_BY_ZERO => "22012",
        TOO_LONG => "22001",
        BAD_TIMESTAMP => "22007",
        PARAM_TYPE => "42804",
        FIXED_KEYS => "0A000",
        _ => return None,
    })
}
