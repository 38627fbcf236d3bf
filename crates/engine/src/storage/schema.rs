//! Table schemas: fixed-width columns packed into 8-byte words.
//!
//! Rows are stored as `u64` words so that concurrent readers can copy them with
//! relaxed atomic loads (plain moves on x86) without data races. A schema maps
//! each column to a byte offset inside the row; integers and floats are aligned
//! to their size, strings are fixed-length byte arrays padded with zeros.

use std::fmt::Display;

use crate::Error;

/// A column type. Strings have a fixed capacity in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColType {
    I32,
    I64,
    U64,
    F64,
    Str(u16),
}

impl ColType {
    fn size(self) -> usize {
        match self {
            ColType::I32 => 4,
            ColType::I64 | ColType::U64 | ColType::F64 => 8,
            ColType::Str(n) => n as usize,
        }
    }
    fn align(self) -> usize {
        match self {
            ColType::I32 => 4,
            ColType::I64 | ColType::U64 | ColType::F64 => 8,
            ColType::Str(_) => 1,
        }
    }
}

/// The type a column shows to SQL (`islands serve`'s statements on tables).
/// A timestamp is stored in an `I64` column as microseconds since the Unix
/// epoch (UTC); a `varchar(n)` in a `Str(n)` column (n bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlType {
    Int8,
    Int4,
    Float8,
    Varchar(u16),
    Timestamp,
}

impl SqlType {
    /// The SQL type a column of storage type `ty` shows by default (an
    /// unsigned 64-bit column shows as `int8`; values past `i64::MAX` are
    /// out of its range).
    pub fn of(ty: ColType) -> SqlType {
        match ty {
            ColType::I32 => SqlType::Int4,
            ColType::I64 | ColType::U64 => SqlType::Int8,
            ColType::F64 => SqlType::Float8,
            ColType::Str(n) => SqlType::Varchar(n),
        }
    }

    /// Whether a column stored as `ty` can show as this type.
    pub fn fits(self, ty: ColType) -> bool {
        matches!(
            (self, ty),
            (SqlType::Int8, ColType::I64 | ColType::U64 | ColType::I32)
                | (SqlType::Int4, ColType::I32)
                | (SqlType::Float8, ColType::F64)
                | (SqlType::Timestamp, ColType::I64)
        ) || matches!((self, ty), (SqlType::Varchar(a), ColType::Str(b)) if a == b)
    }

    /// Its PostgreSQL name: `int8`, `int4`, `float8`, `varchar(n)`, `timestamp`.
    pub fn name(self) -> String {
        match self {
            SqlType::Int8 => "int8".into(),
            SqlType::Int4 => "int4".into(),
            SqlType::Float8 => "float8".into(),
            SqlType::Varchar(n) => format!("varchar({n})"),
            SqlType::Timestamp => "timestamp".into(),
        }
    }
}

/// A column of a schema: its name, type and byte offset in the row.
#[derive(Clone, Debug)]
pub struct Column {
    pub name: String,
    pub ty: ColType,
    pub offset: usize,
}

/// Handle of a column: index into the schema, resolved once, used on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Col(pub u16);

/// A table's row layout.
#[derive(Clone, Debug)]
pub struct Schema {
    pub columns: Vec<Column>,
    /// Row size in bytes, rounded up to whole words.
    pub row_bytes: usize,
}

impl Schema {
    /// Lays out columns in declaration order, aligning each to its size.
    pub fn new(cols: &[(&str, ColType)]) -> Result<Schema, Error> {
        if cols.is_empty() {
            return Err(Error::Config("a schema needs at least one column".into()));
        }
        let mut columns = Vec::with_capacity(cols.len());
        let mut off = 0usize;
        for (name, ty) in cols {
            if let ColType::Str(0) = ty {
                return Err(Error::Config(format!(
                    "string column '{name}' has length 0"
                )));
            }
            if columns.iter().any(|c: &Column| c.name == *name) {
                return Err(Error::Config(format!("column '{name}' declared twice")));
            }
            let a = ty.align();
            off = off.div_ceil(a) * a;
            columns.push(Column {
                name: (*name).to_string(),
                ty: *ty,
                offset: off,
            });
            off += ty.size();
        }
        let row_bytes = off.div_ceil(8).max(1) * 8;
        Ok(Schema { columns, row_bytes })
    }

    pub fn row_words(&self) -> usize {
        self.row_bytes / 8
    }

    /// Finds a column by name (done once, not on the hot path).
    pub fn col(&self, name: &str) -> Option<Col> {
        self.columns
            .iter()
            .position(|c| c.name == name)
            .map(|i| Col(i as u16))
    }

    pub fn column(&self, c: Col) -> &Column {
        &self.columns[c.0 as usize]
    }
}

/// Read access to a row image (a slice of words).
#[derive(Clone, Copy)]
pub struct RowRef<'a> {
    pub(crate) words: &'a [u64],
    pub(crate) schema: &'a Schema,
}

/// Write access to a row image.
pub struct RowMut<'a> {
    pub(crate) words: &'a mut [u64],
    pub(crate) schema: &'a Schema,
}

fn bytes(words: &[u64]) -> &[u8] {
    // SAFETY: u64 has no padding and u8 has alignment 1 and no invalid values;
    // the byte slice covers exactly the words' memory.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8) }
}

fn bytes_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: as in `bytes`; the exclusive borrow of the words is carried over.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr() as *mut u8, words.len() * 8) }
}

/// Row images as bytes, for the log.
pub fn row_bytes(words: &[u64]) -> &[u8] {
    bytes(words)
}

/// Row words as mutable bytes (for applying a log patch).
pub fn row_bytes_mut(words: &mut [u64]) -> &mut [u8] {
    bytes_mut(words)
}

/// Copies a byte image (from the log or a checkpoint) into row words.
pub fn fill_words(words: &mut [u64], src: &[u8]) {
    let b = bytes_mut(words);
    let n = src.len().min(b.len());
    b[..n].copy_from_slice(&src[..n]);
    b[n..].fill(0);
}

macro_rules! getters {
    ($t:ty) => {
        impl<'a> $t {
            #[inline]
            fn at(&self, c: Col, ty: ColType) -> usize {
                let col = &self.schema.columns[c.0 as usize];
                debug_assert_eq!(
                    std::mem::discriminant(&col.ty),
                    std::mem::discriminant(&ty),
                    "column {} has type {:?}",
                    col.name,
                    col.ty
                );
                col.offset
            }
            #[inline]
            pub fn i64(&self, c: Col) -> i64 {
                let o = self.at(c, ColType::I64);
                i64::from_le_bytes(bytes(&self.words)[o..o + 8].try_into().unwrap())
            }
            #[inline]
            pub fn u64(&self, c: Col) -> u64 {
                let o = self.at(c, ColType::U64);
                u64::from_le_bytes(bytes(&self.words)[o..o + 8].try_into().unwrap())
            }
            #[inline]
            pub fn i32(&self, c: Col) -> i32 {
                let o = self.at(c, ColType::I32);
                i32::from_le_bytes(bytes(&self.words)[o..o + 4].try_into().unwrap())
            }
            #[inline]
            pub fn f64(&self, c: Col) -> f64 {
                let o = self.at(c, ColType::F64);
                f64::from_le_bytes(bytes(&self.words)[o..o + 8].try_into().unwrap())
            }
            /// The string's bytes up to its first zero byte.
            #[inline]
            pub fn str(&self, c: Col) -> &[u8] {
                let col = &self.schema.columns[c.0 as usize];
                let ColType::Str(n) = col.ty else {
                    debug_assert!(false, "column {} is not a string", col.name);
                    return &[];
                };
                let s = &bytes(&self.words)[col.offset..col.offset + n as usize];
                let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
                &s[..end]
            }
            pub fn as_bytes(&self) -> &[u8] {
                bytes(&self.words)
            }
        }
    };
}
getters!(RowRef<'a>);
getters!(RowMut<'a>);

impl<'a> RowMut<'a> {
    #[inline]
    pub fn set_i64(&mut self, c: Col, v: i64) {
        let o = self.at(c, ColType::I64);
        bytes_mut(self.words)[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn set_u64(&mut self, c: Col, v: u64) {
        let o = self.at(c, ColType::U64);
        bytes_mut(self.words)[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn set_i32(&mut self, c: Col, v: i32) {
        let o = self.at(c, ColType::I32);
        bytes_mut(self.words)[o..o + 4].copy_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn set_f64(&mut self, c: Col, v: f64) {
        let o = self.at(c, ColType::F64);
        bytes_mut(self.words)[o..o + 8].copy_from_slice(&v.to_le_bytes());
    }
    /// Sets a string column; longer input is cut to the column's length.
    #[inline]
    pub fn set_str(&mut self, c: Col, v: &[u8]) {
        let col = &self.schema.columns[c.0 as usize];
        let ColType::Str(n) = col.ty else {
            debug_assert!(false, "column {} is not a string", col.name);
            return;
        };
        let dst = &mut bytes_mut(self.words)[col.offset..col.offset + n as usize];
        let k = v.len().min(dst.len());
        dst[..k].copy_from_slice(&v[..k]);
        dst[k..].fill(0);
    }
    /// Adds `delta` to an `I64` column; returns the new value. On overflow
    /// the column is left as it was and the error names it: a procedure
    /// returns it with `?`, and its transaction rolls back
    /// ([`Error::OutOfRange`]). Every sum or difference a procedure stores
    /// should go through these helpers, not `set_i64(c, v + delta)`.
    #[inline]
    pub fn add_i64(&mut self, c: Col, delta: i64) -> Result<i64, Error> {
        let old = self.i64(c);
        let (v, over) = old.overflowing_add(delta);
        if over {
            return Err(self.out_of_range(c, old, '+', delta));
        }
        self.set_i64(c, v);
        Ok(v)
    }
    /// Subtracts `delta` from an `I64` column (as [`RowMut::add_i64`]).
    #[inline]
    pub fn sub_i64(&mut self, c: Col, delta: i64) -> Result<i64, Error> {
        let old = self.i64(c);
        let (v, over) = old.overflowing_sub(delta);
        if over {
            return Err(self.out_of_range(c, old, '-', delta));
        }
        self.set_i64(c, v);
        Ok(v)
    }
    /// Adds `delta` to an `I32` column (as [`RowMut::add_i64`]).
    #[inline]
    pub fn add_i32(&mut self, c: Col, delta: i32) -> Result<i32, Error> {
        let old = self.i32(c);
        let (v, over) = old.overflowing_add(delta);
        if over {
            return Err(self.out_of_range(c, old, '+', delta));
        }
        self.set_i32(c, v);
        Ok(v)
    }
    /// Adds `delta` to a `U64` column (as [`RowMut::add_i64`]).
    #[inline]
    pub fn add_u64(&mut self, c: Col, delta: u64) -> Result<u64, Error> {
        let old = self.u64(c);
        let (v, over) = old.overflowing_add(delta);
        if over {
            return Err(self.out_of_range(c, old, '+', delta));
        }
        self.set_u64(c, v);
        Ok(v)
    }
    #[cold]
    fn out_of_range(&self, c: Col, old: impl Display, op: char, delta: impl Display) -> Error {
        let col = &self.schema.columns[c.0 as usize];
        Error::OutOfRange(format!(
            "column {}: {old} {op} {delta} does not fit its type {:?}",
            col.name, col.ty
        ))
    }
    pub fn as_ref(&self) -> RowRef<'_> {
        RowRef {
            words: self.words,
            schema: self.schema,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_aligns_and_round_trips() {
        let s = Schema::new(&[
            ("a", ColType::I32),
            ("b", ColType::I64),
            ("name", ColType::Str(5)),
            ("x", ColType::F64),
        ])
        .unwrap();
        assert_eq!(s.column(Col(0)).offset, 0);
        assert_eq!(s.column(Col(1)).offset, 8);
        assert_eq!(s.column(Col(2)).offset, 16);
        assert_eq!(s.column(Col(3)).offset, 24);
        assert_eq!(s.row_bytes, 32);
        let mut w = vec![0u64; s.row_words()];
        let mut r = RowMut {
            words: &mut w,
            schema: &s,
        };
        r.set_i32(Col(0), -7);
        r.set_i64(Col(1), i64::MIN);
        r.set_str(Col(2), b"hello world");
        r.set_f64(Col(3), 2.5);
        assert_eq!(r.i32(Col(0)), -7);
        assert_eq!(r.i64(Col(1)), i64::MIN);
        assert_eq!(r.str(Col(2)), b"hello");
        assert_eq!(r.f64(Col(3)), 2.5);
        r.set_str(Col(2), b"hi");
        assert_eq!(r.as_ref().str(Col(2)), b"hi");
    }

    #[test]
    fn checked_arithmetic_refuses_overflow_and_leaves_the_column() {
        let s = Schema::new(&[
            ("big", ColType::I64),
            ("count", ColType::I32),
            ("seq", ColType::U64),
        ])
        .unwrap();
        let mut w = vec![0u64; s.row_words()];
        let mut r = RowMut {
            words: &mut w,
            schema: &s,
        };
        assert_eq!(r.add_i64(Col(0), i64::MAX).unwrap(), i64::MAX);
        let e = r.add_i64(Col(0), 1).unwrap_err();
        assert!(
            matches!(&e, Error::OutOfRange(m) if m.contains("big")),
            "{e}"
        );
        assert_eq!(r.i64(Col(0)), i64::MAX);
        assert_eq!(r.sub_i64(Col(0), i64::MAX).unwrap(), 0);
        assert_eq!(r.sub_i64(Col(0), i64::MAX).unwrap(), -i64::MAX);
        assert!(r.sub_i64(Col(0), 2).is_err());
        assert_eq!(r.i64(Col(0)), -i64::MAX);
        r.set_i32(Col(1), i32::MAX - 1);
        assert_eq!(r.add_i32(Col(1), 1).unwrap(), i32::MAX);
        assert!(r.add_i32(Col(1), 1).is_err());
        assert_eq!(r.i32(Col(1)), i32::MAX);
        r.set_u64(Col(2), u64::MAX);
        let e = r.add_u64(Col(2), 1).unwrap_err();
        assert!(
            e.to_string().starts_with("numeric value out of range"),
            "{e}"
        );
        assert_eq!(r.u64(Col(2)), u64::MAX);
    }

    #[test]
    fn bad_schemas_are_errors() {
        assert!(Schema::new(&[]).is_err());
        assert!(Schema::new(&[("s", ColType::Str(0))]).is_err());
        assert!(Schema::new(&[("a", ColType::I32), ("a", ColType::I64)]).is_err());
    }
}
