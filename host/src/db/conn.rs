//! [`Db`]: a store's handle on its tables, on SQLite or PostgreSQL, and
//! [`Conn`]: what a store's code runs statements on.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::dialect::Dialect;
use super::value::{Row, Value};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("PostgreSQL: {}", super::postgres::describe(.0))]
    Postgres(#[from] ::postgres::Error),
    #[error("column {column} holds {found}, not {wanted}")]
    Type {
        column: usize,
        found: &'static str,
        wanted: &'static str,
    },
    #[error("the query returned no row")]
    NoRow,
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    #[error("lock poisoned by a panicked thread")]
    Poisoned,
}

/// Where the state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file (`$PINCER_HOME/pincer.db`).
    Sqlite(PathBuf),
    /// A PostgreSQL connection string (`postgres://user@host:5432/db` or
    /// `host=/run/postgresql user=pincer dbname=pincer`).
    Postgres(String),
}

/// Where the state is, as people read it: a PostgreSQL password is
/// never shown.
impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => {
                let shown = super::tls::without_password(url)
                    .unwrap_or_else(|| "(a connection string that does not parse)".into());
                write!(f, "PostgreSQL {shown}")
            }
        }
    }
}

impl From<&Path> for Location {
    fn from(path: &Path) -> Self {
        Self::Sqlite(path.to_path_buf())
    }
}

/// What a store runs its statements on: a connection, or a transaction on
/// one. Statements use `?N` parameters and the SQL both backends share
/// ([`super::dialect`]).
pub trait Conn {
    fn dialect(&self) -> Dialect;

    /// Runs a statement; the number of rows it changed.
    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<usize, DbError>;

    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, DbError>;

    /// Creates what a store's schema script (SQLite's words) declares.
    fn schema(&mut self, sql: &str) -> Result<(), DbError>;

    /// Adds the `columns` (name, declaration) `table` lacks: tables written
    /// by an older release gain what a newer one stores, keeping their rows.
    fn add_missing_columns(&mut self, table: &str, columns: &[(&str, &str)])
    -> Result<(), DbError>;

    fn query_opt(&mut self, sql: &str, args: &[Value]) -> Result<Option<Row>, DbError> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    fn query_one(&mut self, sql: &str, args: &[Value]) -> Result<Row, DbError> {
        self.query_opt(sql, args)?.ok_or(DbError::NoRow)
    }
}

/// A store's handle on its tables.
pub struct Db {
    backend: Backend,
}

enum Backend {
    Sqlite(Mutex<rusqlite::Connection>),
    Postgres(super::postgres::Pool),
}

impl Db {
    /// Opens the state at `location`, refusing one written by a newer
    /// release ([`super::SCHEMA_VERSION`]).
    pub fn open(location: &Location) -> Result<Self, DbError> {
        let backend = match location {
            Location::Sqlite(path) => Backend::Sqlite(Mutex::new(super::open(path)?)),
            Location::Postgres(url) => Backend::Postgres(super::postgres::Pool::open(url)?),
        };
        Ok(Self { backend })
    }

    pub fn dialect(&self) -> Dialect {
        match self.backend {
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Runs `f` on a connection, each statement committed on its own.
    pub fn run<R, E>(&self, f: impl FnOnce(&mut dyn Conn) -> Result<R, E> + Send) -> Result<R, E>
    where
        R: Send,
        E: From<DbError> + Send,
    {
        blocking(|| match &self.backend {
            Backend::Sqlite(conn) => {
                let conn = conn.lock().map_err(|_| DbError::Poisoned)?;
                f(&mut super::sqlite::SqliteConn(&conn))
            }
            Backend::Postgres(pool) => pool.run(f),
        })
    }

    /// Runs `f` in one transaction: all of its writes or none. On SQLite
    /// it takes the write lock when it begins (`BEGIN IMMEDIATE`, waiting
    /// up to the busy timeout): every store has a connection of its own, as
    /// every process does, and a deferred transaction that read and then
    /// wrote after another connection's commit would fail at once with
    /// "database is locked". On PostgreSQL it is SERIALIZABLE, and one that
    /// lost a conflict with another daemon's runs `f` again.
    pub fn transaction<R, E>(
        &self,
        f: impl FnMut(&mut dyn Conn) -> Result<R, E> + Send,
    ) -> Result<R, E>
    where
        R: Send,
        E: From<DbError> + Send,
    {
        self.sqlite_or_postgres(rusqlite::TransactionBehavior::Immediate, f)
    }

    /// [`Self::transaction`] for reads only: one consistent view of the
    /// state. On SQLite it takes no write lock (a writer goes on meanwhile,
    /// and the view stays as it was when the first read began); on
    /// PostgreSQL it is the same SERIALIZABLE transaction.
    pub fn read_transaction<R, E>(
        &self,
        f: impl FnMut(&mut dyn Conn) -> Result<R, E> + Send,
    ) -> Result<R, E>
    where
        R: Send,
        E: From<DbError> + Send,
    {
        self.sqlite_or_postgres(rusqlite::TransactionBehavior::Deferred, f)
    }

    /// A SQLite transaction begun with `behavior`, or PostgreSQL's
    /// serializable one (run again on a conflict).
    fn sqlite_or_postgres<R, E>(
        &self,
        behavior: rusqlite::TransactionBehavior,
        mut f: impl FnMut(&mut dyn Conn) -> Result<R, E> + Send,
    ) -> Result<R, E>
    where
        R: Send,
        E: From<DbError> + Send,
    {
        blocking(|| match &self.backend {
            Backend::Sqlite(conn) => {
                let mut conn = conn.lock().map_err(|_| DbError::Poisoned)?;
                let tx = conn
                    .transaction_with_behavior(behavior)
                    .map_err(DbError::from)?;
                let out = f(&mut super::sqlite::SqliteConn(&tx))?;
                tx.commit().map_err(DbError::from)?;
                Ok(out)
            }
            Backend::Postgres(pool) => pool.transaction(f),
        })
    }
}

/// Runs `f`, which may wait for the database (up to [`super::LOCK_WAIT`]
/// for another process's lock, or for this store's connection while a
/// sibling call waits). On a worker of a multi-thread tokio runtime the
/// worker first hands its other tasks to another thread, so a wait here
/// holds up this task only, not the listeners and the gateway sharing the
/// runtime. Elsewhere (a blocking thread, a plain thread, a one-thread
/// runtime, where that hand-over cannot be done) it just runs.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl Location {
    /// The TCP addresses of a PostgreSQL server this location names
    /// (resolved now; none for a unix socket or SQLite): the egress proxy
    /// refuses them to every workspace.
    pub fn tcp_addresses(&self) -> Vec<std::net::SocketAddr> {
        use std::net::ToSocketAddrs as _;
        let Location::Postgres(url) = self else {
            return Vec::new();
        };
        let Some(config) = super::tls::parsed(url) else {
            return Vec::new();
        };
        let ports = config.get_ports();
        config
            .get_hosts()
            .iter()
            .enumerate()
            .filter_map(|(i, host)| match host {
                ::postgres::config::Host::Tcp(name) => {
                    let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
                    Some((name.clone(), port))
                }
                ::postgres::config::Host::Unix(_) => None,
            })
            .flat_map(|at| at.to_socket_addrs().into_iter().flatten())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each store has a connection of its own, so two stores of one daemon
    /// write to one file as two processes would. A transaction that reads
    /// and then writes while another connection commits must wait its turn,
    /// not fail with "database is locked" (as a deferred SQLite transaction
    /// does when its snapshot went stale: the channels bench lost a turn so).
    #[test]
    fn a_read_then_write_never_fails_on_another_connections_commit() {
        crate::db::testing::each_backend(|at| {
            let (a, b) = (Db::open(at).unwrap(), Db::open(at).unwrap());
            a.run(|c| {
                c.schema(
                    "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
                )
            })
            .unwrap();
            std::thread::scope(|s| {
                s.spawn(|| {
                    for n in 0..300 {
                        b.run(|c| c.execute("INSERT INTO t (n) VALUES (?1)", &[Value::Int(n)]))
                            .unwrap();
                    }
                });
                for _ in 0..300 {
                    a.transaction(|tx| {
                        let most: i64 = tx
                            .query_one("SELECT COALESCE(MAX(n), 0) FROM t", &[])?
                            .get(0)?;
                        tx.execute("INSERT INTO t (n) VALUES (?1)", &[Value::Int(most + 1000)])
                    })
                    .unwrap();
                }
            });
            let rows: i64 = a
                .run(|c| c.query_one("SELECT COUNT(*) FROM t", &[])?.get(0))
                .unwrap();
            assert_eq!(rows, 600);
        });
    }

    /// A write blocked by a lock someone else keeps (a transaction left
    /// open by hand) fails after [`crate::db::LOCK_WAIT`] with an error
    /// the caller reports, on both backends, instead of hanging the daemon.
    #[test]
    fn a_write_blocked_by_a_lock_held_elsewhere_fails_instead_of_hanging() {
        crate::db::testing::each_backend(|at| {
            let db = Db::open(at).unwrap();
            let writer = Db::open(at).unwrap();
            db.run(|c| c.schema("CREATE TABLE IF NOT EXISTS t (n INTEGER NOT NULL)"))
                .unwrap();
            let (locked, lock) = std::sync::mpsc::channel();
            let (done, finished) = std::sync::mpsc::channel::<()>();
            let holder = {
                let at = at.clone();
                std::thread::spawn(move || match &at {
                    Location::Sqlite(path) => {
                        let conn = rusqlite::Connection::open(path).unwrap();
                        conn.execute_batch("BEGIN EXCLUSIVE").unwrap();
                        locked.send(()).unwrap();
                        let _ = finished.recv();
                    }
                    Location::Postgres(url) => {
                        let mut client = crate::db::connect_postgres(url).unwrap();
                        let mut tx = client.transaction().unwrap();
                        tx.batch_execute("LOCK TABLE t IN EXCLUSIVE MODE").unwrap();
                        locked.send(()).unwrap();
                        let _ = finished.recv();
                    }
                })
            };
            lock.recv().unwrap();
            let (answer, answered) = std::sync::mpsc::channel();
            // Not a scoped thread: a write that hangs must fail the test
            // here, not hold it at the scope's end.
            std::thread::spawn(move || {
                let _ = answer.send(
                    writer
                        .run(|c| c.execute("INSERT INTO t (n) VALUES (1)", &[]))
                        .map_err(|e| e.to_string()),
                );
            });
            let written = answered
                .recv_timeout(crate::db::LOCK_WAIT * 6)
                .expect("the blocked write gave up");
            let error = written.expect_err("no write while the lock is held");
            assert!(
                error.contains("lock") || error.contains("busy"),
                "says why: {error}"
            );
            done.send(()).unwrap();
            holder.join().unwrap();
            db.run(|c| c.execute("INSERT INTO t (n) VALUES (2)", &[]))
                .expect("writes again once the lock is gone");
            let rows: Vec<i64> = db
                .run(|c| c.query("SELECT n FROM t", &[]))
                .unwrap()
                .iter()
                .map(|r| r.get(0).unwrap())
                .collect();
            assert_eq!(rows, [2], "nothing of the failed write was kept");
        });
    }

    /// Stores add the columns an older release lacked every time they open
    /// (each CLI command), beside a daemon whose transactions read the
    /// table: a column already there must not wait for the table's
    /// exclusive lock (PostgreSQL's `ALTER TABLE … IF NOT EXISTS` takes it
    /// anyway, and would fail after the lock wait).
    #[test]
    fn adding_a_column_already_there_does_not_wait_for_readers() {
        crate::db::testing::each_backend(|at| {
            let db = Db::open(at).unwrap();
            db.run(|c| c.schema("CREATE TABLE IF NOT EXISTS t (a INTEGER)"))
                .unwrap();
            db.transaction(|c| c.add_missing_columns("t", &[("b", "TEXT")]))
                .unwrap();
            db.run(|c| c.execute("INSERT INTO t (a, b) VALUES (1, 'x')", &[]))
                .expect("the new column is there");
            let (locked, lock) = std::sync::mpsc::channel::<()>();
            let (release, released) = std::sync::mpsc::channel::<()>();
            let reader = {
                let at = at.clone();
                let released = std::sync::Mutex::new(released);
                std::thread::spawn(move || {
                    Db::open(&at)
                        .unwrap()
                        .read_transaction(|c| {
                            c.query("SELECT a FROM t", &[])?;
                            let _ = locked.send(());
                            let _ = released.lock().unwrap().recv();
                            Ok::<_, DbError>(())
                        })
                        .unwrap();
                })
            };
            lock.recv().unwrap();
            let again = db.transaction(|c| c.add_missing_columns("t", &[("b", "TEXT")]));
            release.send(()).unwrap();
            reader.join().unwrap();
            again.expect("a column already there is no change, and waits for no lock");
        });
    }

    #[test]
    fn a_postgres_servers_tcp_addresses_are_known() {
        let at = |url: &str| Location::Postgres(url.into()).tcp_addresses();
        assert_eq!(
            at("postgres://pincer:pw@127.0.0.1:6543/pincer"),
            ["127.0.0.1:6543".parse().unwrap()]
        );
        assert_eq!(
            at("host=127.0.0.1,/run/postgresql port=7000,7001 dbname=p"),
            ["127.0.0.1:7000".parse().unwrap()]
        );
        assert_eq!(
            at("host=127.0.0.1 dbname=p"),
            ["127.0.0.1:5432".parse().unwrap()]
        );
        assert!(at("host=/run/postgresql dbname=p").is_empty());
        assert_eq!(
            at("postgres://pincer@127.0.0.1:6543/p?sslmode=verify-full&sslrootcert=%2Fca.pem"),
            ["127.0.0.1:6543".parse().unwrap()],
            "the modes tokio-postgres does not know"
        );
        assert!(
            Location::Sqlite("/h/pincer.db".into())
                .tcp_addresses()
                .is_empty()
        );
    }

    #[test]
    fn a_postgres_password_is_never_shown() {
        let shown = |url: &str| Location::Postgres(url.into()).to_string();
        assert_eq!(
            shown("postgres://pincer:hunter2@db:5432/pincer"),
            "PostgreSQL postgres://pincer:***@db:5432/pincer"
        );
        assert_eq!(
            shown("host=/run/postgresql user=pincer password=hunter2 dbname=p"),
            "PostgreSQL host=/run/postgresql user=pincer password=*** dbname=p"
        );
        assert_eq!(
            shown("host=db password = 'hunter 2' dbname=p"),
            "PostgreSQL host=db password=*** dbname=p"
        );
        assert_eq!(
            shown("host=db password='it\\'s secret"),
            "PostgreSQL (a connection string that does not parse)"
        );
        assert_eq!(
            shown("postgres://pincer@db/p"),
            "PostgreSQL postgres://pincer@db/p"
        );
        assert_eq!(
            shown("postgres://pincer@db/p?sslmode=require&password=hunter2"),
            "PostgreSQL postgres://pincer@db/p?sslmode=require&password=***"
        );
        assert_eq!(
            Location::Sqlite("/h/pincer.db".into()).to_string(),
            "/h/pincer.db"
        );
    }

    #[test]
    fn a_postgres_database_sorting_by_language_rules_is_refused_with_how_to_make_one() {
        let refused = Db::open(&crate::db::testing::database_with(
            "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'",
        ))
        .err()
        .expect("refused")
        .to_string();
        assert!(
            refused.contains("sorts text by an ICU collation"),
            "{refused}"
        );
        assert!(refused.contains("LC_COLLATE 'C'"), "{refused}");
        // The command the message gives makes one that opens.
        Db::open(&crate::db::testing::database_with(
            "TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER libc LC_COLLATE 'C' LC_CTYPE 'C.UTF-8'",
        ))
        .expect("a byte-order database opens");
    }
}
