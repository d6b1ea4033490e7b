//! Copying a state into an empty one (`pincer state copy`), SQLite to
//! PostgreSQL or back: every table the destination knows, row for row,
//! with a row count and a checksum per table read back from both sides.
//!
//! The destination's tables are created first by the stores themselves
//! (each store's `open_at`), so this module only moves rows. Tables one
//! engine derives from others are not copied but rebuilt there: the
//! per-day spend (a trigger on every usage row inserted) and the memory
//! index (FTS5 on SQLite, postings on PostgreSQL).

use std::collections::{BTreeMap, BTreeSet};

use sha2::Digest as _;

use super::{Conn, Db, DbError, Dialect, Location, Row, Value};

/// Derived from other tables, rebuilt by the destination: not copied.
pub const REBUILT: &[&str] = &["gateway_spend_by_day", "memory_meta"];

/// Who runs what now (leases, heartbeats): the running daemons' own, not
/// the home's; a daemon on the destination writes its own.
pub const NOT_COPIED: &[&str] = &["cluster_leases", "cluster_members"];

/// One table as copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub table: String,
    pub rows: u64,
    /// SHA-256 over the rows, order-independent (the sum of each row's
    /// hash), the same on both sides.
    pub checksum: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{0}")]
    Db(#[from] DbError),
    #[error("the source and the destination are the same: {0}")]
    Same(String),
    #[error(
        "the destination already holds rows (in {0}): copy only into an empty database, \
         so nothing there is mixed with or overwritten by the copy"
    )]
    NotEmpty(String),
    #[error(
        "{0} in the source is unknown to this pincer's tables, and would be lost: \
         copy with the pincer release that wrote the file"
    )]
    Unknown(String),
    #[error(
        "table {table}: {rows} row(s) and checksum {source_sum} read back from the source, \
         {copied} row(s) and checksum {destination} from the destination"
    )]
    Mismatch {
        table: String,
        rows: u64,
        source_sum: String,
        copied: u64,
        destination: String,
    },
}

/// Kept by one engine for itself (SQLite's tables, the schema version and
/// the key revocations' generation on PostgreSQL), or the memory index
/// (rebuilt by the destination's store from the memories): not copied.
/// Name patterns of SQL `LIKE`.
const ENGINE_OWN: &[&str] = &[
    "sqlite\\_%",
    "gateway\\_key\\_generation",
    "memory\\_index%",
    "memory\\_fts",
    "memory\\_postings",
    "pincer\\_schema",
];

/// The tables to copy: the source's, less [`ENGINE_OWN`], [`REBUILT`] and
/// [`NOT_COPIED`], each with its columns in order.
fn source_tables(conn: &mut dyn Conn) -> Result<BTreeMap<String, Vec<String>>, DbError> {
    let own = ENGINE_OWN
        .iter()
        .map(|pattern| format!(" AND name NOT LIKE '{pattern}' ESCAPE '\\'"))
        .collect::<String>();
    let listing = match conn.dialect() {
        Dialect::Sqlite => format!(
            "SELECT name FROM (SELECT name FROM sqlite_master WHERE type = 'table') AS t
             WHERE 1 = 1{own}"
        ),
        Dialect::Postgres => format!(
            "SELECT name FROM (SELECT CAST(table_name AS TEXT) AS name
                               FROM information_schema.tables
                               WHERE table_schema = current_schema()
                                 AND table_type = 'BASE TABLE') AS t
             WHERE 1 = 1{own}"
        ),
    };
    let names: Vec<String> = conn
        .query(&listing, &[])?
        .iter()
        .map(|r| r.get(0))
        .collect::<Result<_, _>>()?;
    let mut tables = BTreeMap::new();
    for name in names {
        if REBUILT.contains(&name.as_str()) || NOT_COPIED.contains(&name.as_str()) {
            continue;
        }
        tables.insert(name.clone(), columns_of(conn, &name)?);
    }
    Ok(tables)
}

/// `table`'s columns in order (none: no such table).
fn columns_of(conn: &mut dyn Conn, table: &str) -> Result<Vec<String>, DbError> {
    let sql = match conn.dialect() {
        Dialect::Sqlite => "SELECT name FROM pragma_table_info(?1) ORDER BY cid",
        Dialect::Postgres => {
            "SELECT CAST(column_name AS TEXT) FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = ?1
             ORDER BY ordinal_position"
        }
    };
    conn.query(sql, &[table.into()])?
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// (table, the table it references) for each foreign key among `tables`.
fn references(conn: &mut dyn Conn, tables: &[String]) -> Result<Vec<(String, String)>, DbError> {
    match conn.dialect() {
        Dialect::Postgres => conn
            .query(
                "SELECT CAST(conrelid::regclass AS TEXT), CAST(confrelid::regclass AS TEXT)
                 FROM pg_constraint WHERE contype = 'f'",
                &[],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, r.get(1)?)))
            .collect(),
        Dialect::Sqlite => {
            let mut edges = Vec::new();
            for table in tables {
                for row in conn.query(
                    "SELECT \"table\" FROM pragma_foreign_key_list(?1)",
                    &[table.clone().into()],
                )? {
                    edges.push((table.clone(), row.get(0)?));
                }
            }
            Ok(edges)
        }
    }
}

/// `tables` ordered so a table comes after those its foreign keys name.
fn in_reference_order(conn: &mut dyn Conn, tables: Vec<String>) -> Result<Vec<String>, DbError> {
    let edges = references(conn, &tables)?;
    let mut ordered: Vec<String> = Vec::with_capacity(tables.len());
    let mut left = tables;
    while !left.is_empty() {
        // A table waits while a table it references is still to be copied.
        let pending: BTreeSet<String> = left.iter().cloned().collect();
        let (ready, waiting): (Vec<String>, Vec<String>) = left.into_iter().partition(|t| {
            edges
                .iter()
                .filter(|(from, to)| from == t && to != t)
                .all(|(_, to)| !pending.contains(to))
        });
        if ready.is_empty() {
            // A cycle: no table can go first; keep the rest as they are.
            ordered.extend(waiting);
            break;
        }
        ordered.extend(ready);
        left = waiting;
    }
    Ok(ordered)
}

fn encode(row: &Row, width: usize, hash: &mut sha2::Sha256) {
    for i in 0..width {
        match row.get::<Value>(i).unwrap_or(Value::Null) {
            Value::Null => hash.update([0]),
            Value::Int(v) => {
                hash.update([1]);
                hash.update(v.to_le_bytes());
            }
            Value::Real(v) => {
                hash.update([2]);
                hash.update(v.to_bits().to_le_bytes());
            }
            Value::Text(v) => {
                hash.update([3]);
                hash.update((v.len() as u64).to_le_bytes());
                hash.update(v.as_bytes());
            }
            Value::Blob(v) => {
                hash.update([4]);
                hash.update((v.len() as u64).to_le_bytes());
                hash.update(&v);
            }
        }
    }
}

/// Row count and order-independent checksum of `rows`.
fn summary(rows: &[Row], width: usize) -> (u64, String) {
    let mut sum = [0u8; 32];
    for row in rows {
        let mut hash = sha2::Sha256::new();
        encode(row, width, &mut hash);
        let digest = hash.finalize();
        let mut carry = 0u16;
        for i in (0..32).rev() {
            let v = u16::from(sum[i]) + u16::from(digest[i]) + carry;
            sum[i] = (v & 0xff) as u8;
            carry = v >> 8;
        }
    }
    (rows.len() as u64, hex::encode(sum))
}

/// `name` as a quoted SQL identifier: table and column names come from the
/// source file, which is read, never trusted to be well formed.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn column_list(columns: &[String]) -> String {
    columns
        .iter()
        .map(|c| quoted(c))
        .collect::<Vec<_>>()
        .join(", ")
}

fn select(table: &str, columns: &[String]) -> String {
    format!("SELECT {} FROM {}", column_list(columns), quoted(table))
}

/// Copies every table of the state at `from` into the empty state at `to`
/// (SQLite to PostgreSQL or back), whose tables the stores have created,
/// and checks each by its row count and checksum read back from both
/// sides. `progress` hears of each table as it is done.
pub fn copy(
    from: &Location,
    to: &Location,
    progress: &mut dyn FnMut(&Copied),
) -> Result<Vec<Copied>, CopyError> {
    if from == to {
        return Err(CopyError::Same(from.to_string()));
    }
    let source = Db::open(from)?;
    let destination = Db::open(to)?;
    // One read transaction: the copy is of one moment of the source, even
    // if a daemon writes to it meanwhile.
    let snapshot: Vec<(String, Vec<String>, Vec<Row>)> = source.read_transaction(|conn| {
        let tables = source_tables(conn)?;
        let mut out = Vec::with_capacity(tables.len());
        for (table, columns) in tables {
            let rows = conn.query(&select(&table, &columns), &[])?;
            out.push((table, columns, rows));
        }
        Ok::<_, DbError>(out)
    })?;
    let mut unknown = Vec::new();
    let mut plan = Vec::new();
    let mut order_of = BTreeMap::new();
    destination.run(|conn| -> Result<(), CopyError> {
        for (table, columns, rows) in &snapshot {
            let known: BTreeSet<String> = columns_of(conn, table)?.into_iter().collect();
            if known.is_empty() {
                if !rows.is_empty() {
                    unknown.push(format!("table {table} ({} rows)", rows.len()));
                }
                continue;
            }
            let lost: Vec<&String> = columns.iter().filter(|c| !known.contains(*c)).collect();
            if !lost.is_empty() && !rows.is_empty() {
                unknown.push(format!(
                    "{table}.{}",
                    lost.iter()
                        .map(|c| c.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                continue;
            }
            let held: i64 = conn
                .query_one(&format!("SELECT COUNT(*) FROM {}", quoted(table)), &[])?
                .get(0)?;
            if held > 0 {
                return Err(CopyError::NotEmpty(table.clone()));
            }
            plan.push(table.clone());
        }
        let ordered = in_reference_order(conn, plan.clone())?;
        for (i, t) in ordered.into_iter().enumerate() {
            order_of.insert(t, i);
        }
        Ok(())
    })?;
    if !unknown.is_empty() {
        return Err(CopyError::Unknown(unknown.join("; ")));
    }
    let mut todo: Vec<&(String, Vec<String>, Vec<Row>)> = snapshot
        .iter()
        .filter(|(t, _, _)| order_of.contains_key(t))
        .collect();
    todo.sort_by_key(|(t, _, _)| order_of[t]);
    let mut report = Vec::with_capacity(todo.len());
    for (table, columns, rows) in todo {
        let insert = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            quoted(table),
            column_list(columns),
            (1..=columns.len())
                .map(|i| format!("?{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let width = columns.len();
        destination.transaction(|tx| {
            for row in rows {
                let values: Vec<Value> = (0..width)
                    .map(|i| row.get::<Value>(i))
                    .collect::<Result<_, _>>()?;
                tx.execute(&insert, &values)?;
            }
            restart_identity(tx, table)
        })?;
        let (count, checksum) = summary(rows, width);
        let back = destination.run(|c| c.query(&select(table, columns), &[]))?;
        let (copied, destination_sum) = summary(&back, width);
        if (count, &checksum) != (copied, &destination_sum) {
            return Err(CopyError::Mismatch {
                table: table.clone(),
                rows: count,
                source_sum: checksum,
                copied,
                destination: destination_sum,
            });
        }
        let done = Copied {
            table: table.clone(),
            rows: count,
            checksum: checksum[..16].to_owned(),
        };
        progress(&done);
        report.push(done);
    }
    Ok(report)
}

/// Rows copied with their ids leave a PostgreSQL identity column's
/// sequence behind: the next insert would take an id already used. Moves it
/// past the largest. (SQLite moves its own on each insert.)
fn restart_identity(tx: &mut dyn Conn, table: &str) -> Result<(), DbError> {
    if tx.dialect() == Dialect::Sqlite {
        return Ok(());
    }
    let identity = tx.query(
        "SELECT CAST(column_name AS TEXT) FROM information_schema.columns
         WHERE table_schema = current_schema() AND table_name = ?1 AND is_identity = 'YES'",
        &[table.into()],
    )?;
    for column in identity {
        let column: String = column.get(0)?;
        tx.execute(
            &format!(
                "SELECT setval(pg_get_serial_sequence(CAST(?1 AS TEXT), CAST(?2 AS TEXT)),
                               COALESCE((SELECT MAX({}) FROM {}), 0) + 1, false)",
                quoted(&column),
                quoted(table)
            ),
            &[table.into(), column.into()],
        )?;
    }
    Ok(())
}
