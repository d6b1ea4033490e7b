//! The host's state: one table set per subsystem, in one SQLite file under
//! `PINCER_HOME` (WAL, so readers never block the writer) or in a shared
//! PostgreSQL database that several daemons use at once.
//!
//! Stores written against [`Db`] and [`Conn`] run on either backend with one
//! set of statements (see [`dialect`]); stores not yet moved over still
//! open the SQLite file with [`open`].

mod conn;
pub mod copy;
pub mod dialect;
mod postgres;
mod sqlite;
/// Test support (unit and end-to-end tests): a private PostgreSQL server.
#[doc(hidden)]
pub mod testing;
mod tls;
mod value;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

pub use conn::{Conn, Db, DbError, Location};
pub use dialect::Dialect;
pub use postgres::connect as connect_postgres;
pub use value::{FromValue, Row, Value};

pub const FILE_NAME: &str = "pincer.db";

/// The shape of the database this binary reads and writes, kept in SQLite's
/// `user_version`. Each store creates the tables and columns it lacks when
/// it opens (so an older file is brought forward in place); a file whose
/// version is newer than this was written by a newer pincer, whose columns
/// and rules this binary does not know, and is refused rather than written
/// to. Raise it with every change to a table's shape.
pub const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for a row or table another connection holds
/// before it fails: SQLite's busy timeout, PostgreSQL's `lock_timeout`. A
/// stuck lock (a transaction left open by hand, a disk that refuses writes)
/// becomes an error the caller reports, not a daemon that hangs.
pub const LOCK_WAIT: Duration = Duration::from_secs(5);

pub fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(LOCK_WAIT)?;
    let found: i64 = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!(
                "{} has schema version {found}, newer than the {SCHEMA_VERSION} this pincer \
                 knows: it was written by a newer release of pincer. Run that release \
                 (or a newer one); this one leaves the file untouched",
                path.display()
            )),
        ));
    }
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    if found < SCHEMA_VERSION {
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    Ok(conn)
}

/// Adds the `columns` (name, declaration) `table` lacks: tables written by
/// an older release gain what a newer one stores, keeping their rows.
pub fn add_missing_columns(
    conn: &Connection,
    table: &str,
    columns: &[(&str, &str)],
) -> rusqlite::Result<()> {
    for (column, declared) in columns {
        let present: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)",
            [table, column],
            |row| row.get(0),
        )?;
        if !present {
            conn.execute_batch(&format!(
                "ALTER TABLE {table} ADD COLUMN {column} {declared}"
            ))?;
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch, as stored in every table.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A stored time (milliseconds since the epoch) as people read it:
/// `2026-12-05T15:30:00Z`.
pub fn utc_text(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_older_file_is_brought_forward_and_a_newer_one_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        {
            let old = Connection::open(&path).unwrap();
            old.execute_batch("CREATE TABLE kept (v TEXT); INSERT INTO kept VALUES ('row')")
                .unwrap();
        }
        let conn = open(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);

        let refused = open(&path).unwrap_err().to_string();
        assert!(
            refused.contains(&format!(
                "has schema version {}, newer than the {SCHEMA_VERSION} this pincer knows",
                SCHEMA_VERSION + 1
            )),
            "{refused}"
        );
        let raw = Connection::open(&path).unwrap();
        let (version, kept): (i64, String) = (
            raw.pragma_query_value(None, "user_version", |r| r.get(0))
                .unwrap(),
            raw.query_row("SELECT v FROM kept", [], |r| r.get(0))
                .unwrap(),
        );
        assert_eq!((version, kept.as_str()), (SCHEMA_VERSION + 1, "row"));
    }
}
