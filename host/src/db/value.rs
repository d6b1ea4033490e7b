//! The values a store writes and reads, the same for every backend: SQLite's
//! five storage classes, which PostgreSQL's `BIGINT`, `DOUBLE PRECISION`,
//! `TEXT` and `BYTEA` columns map onto one for one.

use super::DbError;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Self::Null => "NULL",
            Self::Int(_) => "an integer",
            Self::Real(_) => "a real",
            Self::Text(_) => "text",
            Self::Blob(_) => "a blob",
        }
    }
}

macro_rules! from_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Self::Int(i64::from(v))
            }
        }
    )*};
}
from_int!(i64, i32, u32, u16, u8, bool);

impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Self::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Self::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Self::Real(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::Text(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Text(v)
    }
}

impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Self::Text(v.clone())
    }
}

impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Self {
        Self::Blob(v.to_vec())
    }
}

impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Self::Blob(v)
    }
}

impl From<&Vec<u8>> for Value {
    fn from(v: &Vec<u8>) -> Self {
        Self::Blob(v.clone())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::Null, Into::into)
    }
}

impl<T: Clone + Into<Value>> From<&Option<T>> for Value {
    fn from(v: &Option<T>) -> Self {
        v.clone().map_or(Self::Null, Into::into)
    }
}

/// `args![a, b, …]`: the parameters of a statement (`?1`, `?2`, …).
#[macro_export]
macro_rules! args {
    () => { &[] as &[$crate::db::Value] };
    ($($v:expr),+ $(,)?) => { &[$($crate::db::Value::from($v)),+] as &[$crate::db::Value] };
}

/// A row as read: its columns in the order the query selected them.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub(super) Vec<Value>);

impl Row {
    pub fn get<T: FromValue>(&self, column: usize) -> Result<T, DbError> {
        let value = self.0.get(column).unwrap_or(&Value::Null);
        T::from_value(value).ok_or_else(|| DbError::Type {
            column,
            found: value.kind(),
            wanted: std::any::type_name::<T>(),
        })
    }
}

/// What a column can be read as.
pub trait FromValue: Sized {
    fn from_value(value: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }
}

macro_rules! from_value_int {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(value: &Value) -> Option<Self> {
                i64::from_value(value).and_then(|v| <$t>::try_from(v).ok())
            }
        }
    )*};
}
from_value_int!(i32, u32, u64, usize, u16, u8);

impl FromValue for bool {
    fn from_value(value: &Value) -> Option<Self> {
        i64::from_value(value).map(|v| v != 0)
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Real(v) => Some(*v),
            #[allow(clippy::cast_precision_loss)]
            Value::Int(v) => Some(*v as f64),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Text(v) => Some(v.clone()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Blob(v) => Some(v.clone()),
            _ => None,
        }
    }
}

impl FromValue for Value {
    fn from_value(value: &Value) -> Option<Self> {
        Some(value.clone())
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Null => Some(None),
            v => T::from_value(v).map(Some),
        }
    }
}
