//! [`super::Conn`] on PostgreSQL (the `postgres` crate, the blocking
//! face of `tokio-postgres`), and the small pool a [`super::Db`] keeps.
//!
//! Stores are synchronous and are called from async code as well as from
//! plain threads. The blocking client drives its connection on a runtime of
//! its own, which tokio refuses to start inside another runtime's thread, so
//! work called from inside a runtime runs on a scoped thread of its own
//! (≈20 µs, beside a round trip to the server that costs more).

use std::collections::HashMap;
use std::error::Error as _;
use std::sync::Mutex;

use ::postgres::error::SqlState;
use ::postgres::types::{IsNull, ToSql, Type};
use ::postgres::{GenericClient, IsolationLevel, Statement};
use bytes::BytesMut;

use super::conn::{Conn, DbError};
use super::dialect::{Dialect, pg_parameters, pg_schema};
use super::value::{Row, Value};

/// Connections kept open between calls.
const IDLE: usize = 8;
/// Runs of a transaction that lost a serialization conflict before giving up.
const ATTEMPTS: usize = 20;
/// Held (per transaction) by whoever creates or alters tables, so two
/// daemons starting at once do not race on the catalog.
const SCHEMA_LOCK: i64 = 0x7069_6e63_6572; // "pincer"

/// A PostgreSQL error as people read it: the server's message, detail and
/// hint when it sent one, else what the client saw.
pub(super) fn describe(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = format!("{}: {}", db.severity(), db.message());
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            if let Some(hint) = db.hint() {
                text.push_str(&format!("; hint: {hint}"));
            }
            text
        }
        None => match e.source() {
            Some(source) => format!("{e}: {source}"),
            None => e.to_string(),
        },
    }
}

struct Client {
    client: ::postgres::Client,
    statements: HashMap<String, Statement>,
}

/// A client connected to `url` with the TLS its `sslmode` asks for
/// ([`super::tls`]).
pub fn connect(url: &str) -> Result<::postgres::Client, DbError> {
    Ok(super::tls::for_url(url)?.connect()?)
}

pub(super) struct Pool {
    /// What tokio-postgres reads, and the TLS connector.
    tls: super::tls::Tls,
    idle: Mutex<Vec<Client>>,
}

/// Runs `f` where the blocking client may block: on a scoped thread when
/// called from inside a tokio runtime, else right here.
fn off_runtime<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(out) => out,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl Pool {
    /// Connects once (so a wrong address or password is reported here) and
    /// checks the database's schema version.
    pub fn open(url: &str) -> Result<Self, DbError> {
        let pool = Self {
            tls: super::tls::for_url(url)?,
            idle: Mutex::new(Vec::new()),
        };
        pool.transaction(|conn| {
            byte_order(conn)?;
            conn.schema("CREATE TABLE IF NOT EXISTS pincer_schema (version INTEGER NOT NULL)")?;
            let found: Option<i64> =
                match conn.query_opt("SELECT version FROM pincer_schema", &[])? {
                    Some(row) => row.get(0)?,
                    None => None,
                };
            match found {
                Some(v) if v > super::SCHEMA_VERSION => Err(DbError::Unsupported(format!(
                    "the PostgreSQL database has schema version {v}, newer than the {} this \
                     pincer knows: it was written by a newer release of pincer. Run that \
                     release (or a newer one); this one leaves the database untouched",
                    super::SCHEMA_VERSION
                ))),
                Some(v) if v == super::SCHEMA_VERSION => Ok(()),
                Some(_) => conn
                    .execute(
                        "UPDATE pincer_schema SET version = ?1",
                        &[super::SCHEMA_VERSION.into()],
                    )
                    .map(drop),
                None => conn
                    .execute(
                        "INSERT INTO pincer_schema (version) VALUES (?1)",
                        &[super::SCHEMA_VERSION.into()],
                    )
                    .map(drop),
            }
        })?;
        Ok(pool)
    }

    fn checkout(&self) -> Result<Client, DbError> {
        let idle = self.idle.lock().map_err(|_| DbError::Poisoned)?.pop();
        match idle {
            Some(client) if !client.client.is_closed() => Ok(client),
            _ => {
                let mut client = self.tls.connect()?;
                client
                    .batch_execute(&format!(
                        "SET lock_timeout = {}",
                        super::LOCK_WAIT.as_millis()
                    ))
                    .map_err(DbError::Postgres)?;
                Ok(Client {
                    client,
                    statements: HashMap::new(),
                })
            }
        }
    }

    fn give_back(&self, client: Client) {
        if client.client.is_closed() {
            return;
        }
        if let Ok(mut idle) = self.idle.lock()
            && idle.len() < IDLE
        {
            idle.push(client);
        }
    }

    pub fn run<R, E>(&self, f: impl FnOnce(&mut dyn Conn) -> Result<R, E> + Send) -> Result<R, E>
    where
        R: Send,
        E: From<DbError> + Send,
    {
        off_runtime(|| {
            let mut client = self.checkout()?;
            let Client {
                client: c,
                statements,
            } = &mut client;
            let out = f(&mut PgConn {
                client: c,
                statements,
            });
            self.give_back(client);
            out
        })
    }

    pub fn transaction<R, E>(
        &self,
        mut f: impl FnMut(&mut dyn Conn) -> Result<R, E> + Send,
    ) -> Result<R, E>
    where
        R: Send,
        E: From<DbError> + Send,
    {
        off_runtime(|| {
            let mut client = self.checkout()?;
            let mut attempt = 0;
            let out = loop {
                attempt += 1;
                match Self::attempt(&mut client, &mut f) {
                    Err(Failure::Conflict(e)) if attempt < ATTEMPTS => {
                        drop(e);
                        tracing::debug!("transaction {attempt} lost a conflict; running it again");
                        std::thread::sleep(std::time::Duration::from_millis(attempt as u64));
                    }
                    Err(Failure::Conflict(e) | Failure::Other(e)) => break Err(e),
                    Ok(out) => break Ok(out),
                }
            };
            self.give_back(client);
            out
        })
    }

    fn attempt<R, E>(
        client: &mut Client,
        f: &mut impl FnMut(&mut dyn Conn) -> Result<R, E>,
    ) -> Result<R, Failure<E>>
    where
        E: From<DbError>,
    {
        let Client { client, statements } = client;
        CONFLICTED.with(|c| c.set(false));
        let mut tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::Serializable)
            .start()
            .map_err(Failure::from_pg)?;
        let out = f(&mut PgConn {
            client: &mut tx,
            statements,
        });
        match out {
            Ok(out) => {
                tx.commit().map_err(Failure::from_pg)?;
                Ok(out)
            }
            // A statement's conflict comes back as the store's own error,
            // which may not say so: the flag [`noted`] set does.
            Err(e) if CONFLICTED.with(std::cell::Cell::get) => Err(Failure::Conflict(e)),
            Err(e) => Err(Failure::Other(e)),
        }
    }
}

/// Stores sort text by its bytes (`ORDER BY key`, `LIMIT`), as SQLite does.
/// A database whose collation sorts by language rules ("a" < "B") would
/// list, page and pick differently, so it is refused with how to make one
/// that sorts by bytes.
fn byte_order(conn: &mut dyn Conn) -> Result<(), DbError> {
    let row = conn.query_one(
        "SELECT CAST(datcollate AS TEXT), CAST(datlocprovider AS TEXT)
         FROM pg_database WHERE datname = current_database()",
        &[],
    )?;
    let (collate, provider): (String, String) = (row.get(0)?, row.get(1)?);
    let bytewise =
        provider == "c" && matches!(collate.as_str(), "C" | "POSIX" | "C.UTF-8" | "C.utf8");
    if bytewise {
        return Ok(());
    }
    let shown = if provider == "i" {
        "an ICU collation".to_owned()
    } else {
        format!("collation {collate}")
    };
    Err(DbError::Unsupported(format!(
        "this PostgreSQL database sorts text by {shown}; pincer's stores sort by bytes, as \
         on SQLite. Create the database with a byte-order collation: CREATE DATABASE pincer \
         TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER libc LC_COLLATE 'C' LC_CTYPE 'C.UTF-8'"
    )))
}

impl Drop for Pool {
    /// A blocking client closes its connection on drop, on its own runtime:
    /// off any runtime this pool is dropped in.
    fn drop(&mut self) {
        let idle = std::mem::take(self.idle.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !idle.is_empty() {
            off_runtime(move || drop(idle));
        }
    }
}

enum Failure<E> {
    /// Lost a serialization conflict (or a deadlock): worth running again.
    Conflict(E),
    Other(E),
}

impl<E: From<DbError>> Failure<E> {
    fn from_pg(e: ::postgres::Error) -> Self {
        if is_conflict(&e) {
            Self::Conflict(E::from(DbError::Postgres(e)))
        } else {
            Self::Other(E::from(DbError::Postgres(e)))
        }
    }
}

fn is_conflict(e: &::postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

thread_local! {
    /// Set when a statement of the running transaction lost a conflict.
    static CONFLICTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

struct PgConn<'a, C: GenericClient> {
    client: &'a mut C,
    statements: &'a mut HashMap<String, Statement>,
}

impl<C: GenericClient> PgConn<'_, C> {
    fn statement(&mut self, sql: &str) -> Result<Statement, DbError> {
        if let Some(stmt) = self.statements.get(sql) {
            return Ok(stmt.clone());
        }
        let stmt = self.client.prepare(&pg_parameters(sql)).map_err(noted)?;
        self.statements.insert(sql.to_owned(), stmt.clone());
        Ok(stmt)
    }
}

/// Flags a conflict for [`Pool::transaction`] to see, then hands the error on.
fn noted(e: ::postgres::Error) -> DbError {
    if is_conflict(&e) {
        CONFLICTED.with(|c| c.set(true));
    }
    DbError::Postgres(e)
}

fn params(args: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

impl<C: GenericClient> Conn for PgConn<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<usize, DbError> {
        let stmt = self.statement(sql)?;
        let n = self.client.execute(&stmt, &params(args)).map_err(noted)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, DbError> {
        let stmt = self.statement(sql)?;
        let rows = self.client.query(&stmt, &params(args)).map_err(noted)?;
        rows.iter().map(row).collect()
    }

    fn schema(&mut self, sql: &str) -> Result<(), DbError> {
        self.client
            .execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .map_err(noted)?;
        self.client.batch_execute(&pg_schema(sql)).map_err(noted)
    }

    fn add_missing_columns(
        &mut self,
        table: &str,
        columns: &[(&str, &str)],
    ) -> Result<(), DbError> {
        // `ALTER TABLE … IF NOT EXISTS` takes the table's exclusive lock
        // even when the column is there, and stores open on every CLI
        // command: only columns the catalog lacks are altered.
        let present: Vec<String> = self
            .query(
                "SELECT CAST(column_name AS TEXT) FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = ?1",
                &[Value::Text(table.to_owned())],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect::<Result<_, _>>()?;
        for (column, declared) in columns {
            if present.iter().any(|p| p == column) {
                continue;
            }
            self.schema(&format!(
                "ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {declared}"
            ))?;
        }
        Ok(())
    }
}

fn row(r: &::postgres::Row) -> Result<Row, DbError> {
    let mut out = Vec::with_capacity(r.len());
    for (i, column) in r.columns().iter().enumerate() {
        let ty = column.type_();
        let value = match *ty {
            Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Value::Int),
            Type::INT4 => r
                .try_get::<_, Option<i32>>(i)?
                .map(|v| Value::Int(v.into())),
            Type::INT2 => r
                .try_get::<_, Option<i16>>(i)?
                .map(|v| Value::Int(v.into())),
            Type::BOOL => r
                .try_get::<_, Option<bool>>(i)?
                .map(|v| Value::Int(v.into())),
            Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map(Value::Real),
            Type::FLOAT4 => r
                .try_get::<_, Option<f32>>(i)?
                .map(|v| Value::Real(v.into())),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                r.try_get::<_, Option<String>>(i)?.map(Value::Text)
            }
            Type::BYTEA => r.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Blob),
            _ => {
                return Err(DbError::Unsupported(format!(
                    "column {} ({}) is of PostgreSQL type {ty}, which stores do not read: \
                     CAST it (AS BIGINT, AS TEXT, …)",
                    i,
                    column.name()
                )));
            }
        };
        out.push(value.unwrap_or(Value::Null));
    }
    Ok(Row(out))
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match (self, ty) {
            (Self::Null, _) => Ok(IsNull::Yes),
            (Self::Int(v), &Type::INT8) => v.to_sql(ty, out),
            (Self::Int(v), &Type::INT4) => i32::try_from(*v)?.to_sql(ty, out),
            (Self::Int(v), &Type::INT2) => i16::try_from(*v)?.to_sql(ty, out),
            (Self::Int(v), &Type::BOOL) => (*v != 0).to_sql(ty, out),
            #[allow(clippy::cast_precision_loss)]
            (Self::Int(v), &Type::FLOAT8) => (*v as f64).to_sql(ty, out),
            (Self::Real(v), &Type::FLOAT8) => v.to_sql(ty, out),
            #[allow(clippy::cast_possible_truncation)]
            (Self::Real(v), &Type::FLOAT4) => (*v as f32).to_sql(ty, out),
            (Self::Text(v), _) if <&str as ToSql>::accepts(ty) => v.as_str().to_sql(ty, out),
            (Self::Blob(v), &Type::BYTEA) => v.as_slice().to_sql(ty, out),
            (v, ty) => Err(format!("{v:?} cannot be bound to a parameter of type {ty}").into()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    ::postgres::types::to_sql_checked!();
}
