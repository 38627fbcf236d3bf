//! Values that cross the API: a procedure's arguments and its result rows.

use std::fmt;

/// The type of a procedure parameter or of a result column.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// A signed 64-bit integer.
    Int,
    /// A 64-bit float.
    Float,
    /// A UTF-8 string.
    Str,
    /// An array of signed 64-bit integers (a batch of keys).
    Ints,
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Type::Int => "int",
            Type::Float => "float",
            Type::Str => "string",
            Type::Ints => "int[]",
        })
    }
}

/// One value: an argument or a field of a result row.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Float(f64),
    Str(String),
    Ints(Vec<i64>),
}

impl Value {
    /// Its type; `None` for a null.
    pub fn type_of(&self) -> Option<Type> {
        match self {
            Value::Null => None,
            Value::Int(_) => Some(Type::Int),
            Value::Float(_) => Some(Type::Float),
            Value::Str(_) => Some(Type::Str),
            Value::Ints(_) => Some(Type::Ints),
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_ints(&self) -> Option<&[i64]> {
        match self {
            Value::Ints(v) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("null"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Str(v) => write!(f, "{v:?}"),
            Value::Ints(v) => write!(f, "{v:?}"),
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Str(v.to_string())
    }
}

impl From<Vec<i64>> for Value {
    fn from(v: Vec<i64>) -> Value {
        Value::Ints(v)
    }
}

impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Str(v)
    }
}

/// A result row: one value per column the procedure declares.
pub type Row = Vec<Value>;

/// A procedure's arguments, checked against its parameters before it runs:
/// argument `i` has parameter `i`'s type and is not null.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Args(pub(crate) Vec<Value>);

impl Args {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, i: usize) -> &Value {
        &self.0[i]
    }

    /// Argument `i`, declared [`Type::Int`].
    ///
    /// # Panics
    /// If parameter `i` is not an integer: the procedure disagrees with its
    /// own declaration (the call fails with that message; the executor goes on).
    pub fn int(&self, i: usize) -> i64 {
        self.0[i]
            .as_int()
            .unwrap_or_else(|| panic!("argument {i} is {:?}, not an integer", self.0[i].type_of()))
    }

    /// Argument `i`, declared [`Type::Float`] (panics as [`Args::int`]).
    pub fn float(&self, i: usize) -> f64 {
        self.0[i]
            .as_float()
            .unwrap_or_else(|| panic!("argument {i} is {:?}, not a float", self.0[i].type_of()))
    }

    /// Argument `i`, declared [`Type::Ints`] (panics as [`Args::int`]).
    pub fn ints(&self, i: usize) -> &[i64] {
        self.0[i]
            .as_ints()
            .unwrap_or_else(|| panic!("argument {i} is {:?}, not an int[]", self.0[i].type_of()))
    }

    /// Argument `i`, declared [`Type::Str`] (panics as [`Args::int`]).
    pub fn str(&self, i: usize) -> &str {
        self.0[i]
            .as_str()
            .unwrap_or_else(|| panic!("argument {i} is {:?}, not a string", self.0[i].type_of()))
    }
}
