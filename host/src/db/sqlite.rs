//! [`super::Conn`] on a SQLite connection (or transaction).

use rusqlite::types::ValueRef;

use super::conn::{Conn, DbError};
use super::dialect::Dialect;
use super::value::{Row, Value};

pub(super) struct SqliteConn<'a>(pub &'a rusqlite::Connection);

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::ToSqlOutput::Borrowed;
        Ok(Borrowed(match self {
            Self::Null => ValueRef::Null,
            Self::Int(v) => ValueRef::Integer(*v),
            Self::Real(v) => ValueRef::Real(*v),
            Self::Text(v) => ValueRef::Text(v.as_bytes()),
            Self::Blob(v) => ValueRef::Blob(v),
        }))
    }
}

fn value(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(v) => Value::Int(v),
        ValueRef::Real(v) => Value::Real(v),
        ValueRef::Text(v) => Value::Text(String::from_utf8_lossy(v).into_owned()),
        ValueRef::Blob(v) => Value::Blob(v.to_vec()),
    }
}

impl Conn for SqliteConn<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<usize, DbError> {
        let mut stmt = self.0.prepare_cached(sql)?;
        Ok(stmt.execute(rusqlite::params_from_iter(args))?)
    }

    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, DbError> {
        let mut stmt = self.0.prepare_cached(sql)?;
        let width = stmt.column_count();
        let mut rows = stmt.query(rusqlite::params_from_iter(args))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let mut columns = Vec::with_capacity(width);
            for i in 0..width {
                columns.push(value(row.get_ref(i)?));
            }
            out.push(Row(columns));
        }
        Ok(out)
    }

    fn schema(&mut self, sql: &str) -> Result<(), DbError> {
        Ok(self.0.execute_batch(sql)?)
    }

    fn add_missing_columns(
        &mut self,
        table: &str,
        columns: &[(&str, &str)],
    ) -> Result<(), DbError> {
        Ok(super::add_missing_columns(self.0, table, columns)?)
    }
}
