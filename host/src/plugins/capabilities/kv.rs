//! The `kv` capability: a key-value store private to each (owner, plugin)
//! pair, where the owner is a workspace or a channel, with TTL and versioned
//! compare-and-set, kept in the host database.

use std::path::Path;
use std::sync::Arc;

use crate::args;
use crate::db::{Conn, Db, DbError, Dialect, Location, now_ms};

pub const MAX_KEY_BYTES: usize = 512;
pub const MAX_VALUE_BYTES: usize = 1 << 20;
pub const MAX_KEYS: i64 = 10_000;
pub const MAX_TOTAL_BYTES: i64 = 64 << 20;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    #[error("invalid key: {0}")]
    InvalidKey(String),
    #[error("storage: {0}")]
    Storage(String),
}

impl From<DbError> for KvError {
    fn from(e: DbError) -> Self {
        Self::Storage(e.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub value: Vec<u8>,
    pub version: u64,
}

/// The columns of `plugin_kv`: entries keyed by owner (a workspace or
/// channel scope), plugin and key.
const KV_COLUMNS: &str = "owner TEXT NOT NULL, plugin TEXT NOT NULL, key TEXT NOT NULL, \
    value BLOB NOT NULL, version INTEGER NOT NULL, expires_at_ms INTEGER, \
    PRIMARY KEY (owner, plugin, key)";

/// The shared store; hand each (owner, plugin) its own [`KvNamespace`].
pub struct KvStore {
    db: Db,
}

/// Rows moved from the old per-plugin layout by [`KvStore::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Migrated {
    pub rows: usize,
}

impl KvStore {
    pub fn open(path: &Path) -> Result<Arc<Self>, KvError> {
        Self::open_at(&Location::from(path))
    }

    pub fn open_at(location: &Location) -> Result<Arc<Self>, KvError> {
        Self::open_migrating_at(location, "workspace:default").map(|(store, _)| store)
    }

    /// Opens the store; rows of the old layout (keyed by plugin only, from
    /// before per-workspace state) are assigned to `legacy_owner`, once.
    pub fn open_migrating(
        path: &Path,
        legacy_owner: &str,
    ) -> Result<(Arc<Self>, Migrated), KvError> {
        Self::open_migrating_at(&Location::from(path), legacy_owner)
    }

    pub fn open_migrating_at(
        location: &Location,
        legacy_owner: &str,
    ) -> Result<(Arc<Self>, Migrated), KvError> {
        let db = Db::open(location)?;
        let migrated = db.transaction(|tx| {
            let migrated = migrate(tx, legacy_owner)?;
            tx.schema(&format!(
                "CREATE TABLE IF NOT EXISTS plugin_kv ({KV_COLUMNS}) WITHOUT ROWID;"
            ))?;
            Ok::<_, DbError>(migrated)
        })?;
        Ok((Arc::new(Self { db }), migrated))
    }

    /// `owner` is a [`crate::plugins::scope::Scope`] key (`workspace:NAME`).
    pub fn namespace(self: &Arc<Self>, owner: &str, plugin: &str) -> KvNamespace {
        KvNamespace {
            store: self.clone(),
            owner: owner.to_string(),
            plugin: plugin.to_string(),
        }
    }

    /// The owners (`workspace:NAME`, `channel:NAME`) holding entries of `plugin`.
    pub fn owners_of(&self, plugin: &str) -> Result<Vec<String>, KvError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT DISTINCT owner FROM plugin_kv WHERE plugin = ?1 ORDER BY owner",
                args![plugin],
            )?
            .iter()
            .map(|r| Ok(r.get(0)?))
            .collect()
        })
    }
}

/// Moves a `plugin_kv` table of the old layout (no `owner` column) into the
/// new one under `legacy_owner`. Returns the rows moved.
fn migrate(tx: &mut dyn Conn, legacy_owner: &str) -> Result<Migrated, DbError> {
    // Only a SQLite file can hold the old layout: PostgreSQL came later.
    if tx.dialect() != Dialect::Sqlite {
        return Ok(Migrated::default());
    }
    let has = |tx: &mut dyn Conn, column: &str| -> Result<bool, DbError> {
        tx.query_one(
            "SELECT EXISTS (SELECT 1 FROM pragma_table_info('plugin_kv') WHERE name = ?1)",
            args![column],
        )?
        .get(0)
    };
    if !has(tx, "plugin")? || has(tx, "owner")? {
        return Ok(Migrated::default());
    }
    tx.schema(&format!(
        "CREATE TABLE plugin_kv_scoped ({KV_COLUMNS}) WITHOUT ROWID;"
    ))?;
    let rows = tx.execute(
        "INSERT INTO plugin_kv_scoped (owner, plugin, key, value, version, expires_at_ms)
         SELECT ?1, plugin, key, value, version, expires_at_ms FROM plugin_kv",
        args![legacy_owner],
    )?;
    tx.schema("DROP TABLE plugin_kv; ALTER TABLE plugin_kv_scoped RENAME TO plugin_kv;")?;
    Ok(Migrated { rows })
}

#[derive(Clone)]
pub struct KvNamespace {
    store: Arc<KvStore>,
    owner: String,
    plugin: String,
}

impl KvNamespace {
    /// A read: it waits for no write lock (a plugin reading its state while
    /// another process holds the database's lock would otherwise spend its
    /// whole call deadline on the busy timeout). Only an expired entry is
    /// removed, in a write transaction.
    pub fn get(&self, key: &str) -> Result<Option<Entry>, KvError> {
        check_key(key)?;
        match self.store.db.run(|conn| self.stored_entry(conn, key))? {
            Some((_, Some(expires))) if expires <= now_ms() => {
                self.store.db.transaction(|tx| self.live_entry(tx, key))
            }
            found => Ok(found.map(|(entry, _)| entry)),
        }
    }

    pub fn set(&self, key: &str, value: &[u8], ttl_ms: Option<u64>) -> Result<u64, KvError> {
        check_key(key)?;
        self.store.db.transaction(|tx| {
            let current = self.live_entry(tx, key)?;
            self.write(tx, key, value, ttl_ms, current.as_ref())
        })
    }

    /// Writes only if the live version equals `expected` (`None`: absent).
    pub fn compare_and_set(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &[u8],
        ttl_ms: Option<u64>,
    ) -> Result<Option<u64>, KvError> {
        check_key(key)?;
        self.store.db.transaction(|tx| {
            let current = self.live_entry(tx, key)?;
            if current.as_ref().map(|e| e.version) != expected {
                return Ok(None);
            }
            self.write(tx, key, value, ttl_ms, current.as_ref())
                .map(Some)
        })
    }

    pub fn delete(&self, key: &str) -> Result<bool, KvError> {
        check_key(key)?;
        self.store.db.transaction(|tx| {
            let existed = self.live_entry(tx, key)?.is_some();
            tx.execute(
                "DELETE FROM plugin_kv WHERE owner = ?1 AND plugin = ?2 AND key = ?3",
                args![&self.owner, &self.plugin, key],
            )?;
            Ok(existed)
        })
    }

    pub fn list_keys(&self, prefix: &str, limit: u32) -> Result<Vec<String>, KvError> {
        self.store.db.run(|conn| {
            conn.query(
                "SELECT key FROM plugin_kv
                 WHERE owner = ?1 AND plugin = ?2
                   AND substr(key, 1, length(CAST(?3 AS TEXT))) = ?3
                   AND (expires_at_ms IS NULL OR expires_at_ms > ?4)
                 ORDER BY key LIMIT ?5",
                args![&self.owner, &self.plugin, prefix, now_ms(), limit.min(1000)],
            )?
            .iter()
            .map(|r| Ok(r.get(0)?))
            .collect()
        })
    }

    /// The row of `key`, expired or not, with its expiry.
    fn stored_entry(
        &self,
        conn: &mut dyn Conn,
        key: &str,
    ) -> Result<Option<(Entry, Option<i64>)>, KvError> {
        let Some(row) = conn.query_opt(
            "SELECT value, version, expires_at_ms FROM plugin_kv
             WHERE owner = ?1 AND plugin = ?2 AND key = ?3",
            args![&self.owner, &self.plugin, key],
        )?
        else {
            return Ok(None);
        };
        let entry = Entry {
            value: row.get(0)?,
            version: row.get(1)?,
        };
        Ok(Some((entry, row.get(2)?)))
    }

    /// The live entry of `key`; an expired one is deleted (`conn` is in a
    /// write transaction).
    fn live_entry(&self, conn: &mut dyn Conn, key: &str) -> Result<Option<Entry>, KvError> {
        match self.stored_entry(conn, key)? {
            Some((_, Some(expires))) if expires <= now_ms() => {
                conn.execute(
                    "DELETE FROM plugin_kv WHERE owner = ?1 AND plugin = ?2 AND key = ?3",
                    args![&self.owner, &self.plugin, key],
                )?;
                Ok(None)
            }
            found => Ok(found.map(|(entry, _)| entry)),
        }
    }

    fn write(
        &self,
        conn: &mut dyn Conn,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
        current: Option<&Entry>,
    ) -> Result<u64, KvError> {
        if value.len() > MAX_VALUE_BYTES {
            return Err(KvError::QuotaExceeded(format!(
                "value of {} bytes is over the {MAX_VALUE_BYTES}-byte limit",
                value.len()
            )));
        }
        let totals = conn.query_one(
            "SELECT COUNT(*), CAST(COALESCE(SUM(length(value)), 0) AS BIGINT) FROM plugin_kv
             WHERE owner = ?1 AND plugin = ?2",
            args![&self.owner, &self.plugin],
        )?;
        let (keys, bytes): (i64, i64) = (totals.get(0)?, totals.get(1)?);
        let replaced = current.map_or(0, |e| e.value.len() as i64);
        if current.is_none() && keys >= MAX_KEYS {
            return Err(KvError::QuotaExceeded(format!(
                "at most {MAX_KEYS} keys per plugin and workspace"
            )));
        }
        if bytes - replaced + value.len() as i64 > MAX_TOTAL_BYTES {
            return Err(KvError::QuotaExceeded(format!(
                "at most {MAX_TOTAL_BYTES} bytes per plugin and workspace"
            )));
        }
        let version = current.map_or(1, |e| e.version + 1);
        let expires = ttl_ms.map(|ttl| now_ms().saturating_add(ttl.min(i64::MAX as u64) as i64));
        conn.execute(
            "INSERT INTO plugin_kv (owner, plugin, key, value, version, expires_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (owner, plugin, key) DO UPDATE SET
               value = excluded.value, version = excluded.version,
               expires_at_ms = excluded.expires_at_ms",
            args![&self.owner, &self.plugin, key, value, version, expires],
        )?;
        Ok(version)
    }
}

fn check_key(key: &str) -> Result<(), KvError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(KvError::InvalidKey(format!(
            "keys are 1 to {MAX_KEY_BYTES} bytes"
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(KvError::InvalidKey(
            "keys cannot contain control characters".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    #[test]
    fn namespaces_are_separate() {
        each_backend(|at| {
            let store = KvStore::open_at(at).unwrap();
            let a = store.namespace("workspace:w", "a");
            let b = store.namespace("workspace:w", "b");
            let other = store.namespace("workspace:v", "a");
            a.set("k", b"1", None).unwrap();
            assert_eq!(b.get("k").unwrap(), None);
            assert_eq!(other.get("k").unwrap(), None);
            assert!(other.list_keys("", 10).unwrap().is_empty());
            assert_eq!(a.get("k").unwrap().unwrap().value, b"1");
        });
    }

    #[test]
    fn the_old_layout_is_assigned_to_the_legacy_owner_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.db");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE plugin_kv (
                    plugin TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
                    version INTEGER NOT NULL, expires_at_ms INTEGER,
                    PRIMARY KEY (plugin, key)
                ) WITHOUT ROWID;
                INSERT INTO plugin_kv VALUES ('skill-notes', 'note:a', x'6869', 3, NULL);",
            )
            .unwrap();
        }
        let (store, migrated) = KvStore::open_migrating(&path, "workspace:default").unwrap();
        assert_eq!(migrated.rows, 1);
        let entry = store
            .namespace("workspace:default", "skill-notes")
            .get("note:a")
            .unwrap()
            .unwrap();
        assert_eq!((entry.value.as_slice(), entry.version), (&b"hi"[..], 3));
        assert_eq!(
            store
                .namespace("workspace:bob", "skill-notes")
                .get("note:a")
                .unwrap(),
            None
        );
        drop(store);
        let (_, again) = KvStore::open_migrating(&path, "workspace:default").unwrap();
        assert_eq!(again.rows, 0);
    }

    #[test]
    fn compare_and_set_follows_versions() {
        each_backend(|at| {
            let store = KvStore::open_at(at).unwrap();
            let ns = store.namespace("workspace:w", "p");
            assert_eq!(ns.compare_and_set("k", None, b"a", None).unwrap(), Some(1));
            assert_eq!(ns.compare_and_set("k", None, b"b", None).unwrap(), None);
            assert_eq!(
                ns.compare_and_set("k", Some(1), b"b", None).unwrap(),
                Some(2)
            );
            assert_eq!(ns.compare_and_set("k", Some(1), b"c", None).unwrap(), None);
            assert_eq!(ns.get("k").unwrap().unwrap().value, b"b");
            assert!(ns.delete("k").unwrap());
            assert!(!ns.delete("k").unwrap());
        });
    }

    #[test]
    fn entries_expire() {
        each_backend(|at| {
            let store = KvStore::open_at(at).unwrap();
            let ns = store.namespace("workspace:w", "p");
            ns.set("gone", b"x", Some(0)).unwrap();
            ns.set("kept", b"x", Some(60_000)).unwrap();
            assert_eq!(ns.get("gone").unwrap(), None);
            assert_eq!(ns.list_keys("", 10).unwrap(), vec!["kept".to_string()]);
        });
    }

    #[test]
    fn bad_keys_and_big_values_are_refused() {
        each_backend(|at| {
            let store = KvStore::open_at(at).unwrap();
            let ns = store.namespace("workspace:w", "p");
            assert!(matches!(
                ns.set("", b"x", None),
                Err(KvError::InvalidKey(_))
            ));
            assert!(matches!(
                ns.set("a\nb", b"x", None),
                Err(KvError::InvalidKey(_))
            ));
            let big = vec![0u8; MAX_VALUE_BYTES + 1];
            assert!(matches!(
                ns.set("k", &big, None),
                Err(KvError::QuotaExceeded(_))
            ));
            assert_eq!(ns.get("k").unwrap(), None);
        });
    }

    /// Another process holding the write lock (a backup, a `sqlite3` shell)
    /// does not make a plugin's reads wait: they would otherwise fail after
    /// the busy timeout, having spent the plugin call's whole deadline.
    #[test]
    fn reads_go_on_while_another_process_holds_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(crate::db::FILE_NAME);
        let store = KvStore::open_at(&Location::from(path.as_path())).unwrap();
        let ns = store.namespace("workspace:w", "p");
        ns.set("bot/open_id", b"ou_bot", None).unwrap();
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        assert_eq!(ns.get("bot/open_id").unwrap().unwrap().value, b"ou_bot");
        assert_eq!(ns.get("absent").unwrap(), None);
        assert_eq!(ns.list_keys("bot/", 10).unwrap(), ["bot/open_id"]);
        other.execute_batch("ROLLBACK").unwrap();
    }

    #[test]
    fn keys_by_prefix_and_owners_read_back_the_same() {
        each_backend(|at| {
            let store = KvStore::open_at(at).unwrap();
            let ns = store.namespace("workspace:w", "p");
            for key in ["note:b", "note:a", "Note:c", "other", "note"] {
                ns.set(key, key.as_bytes(), None).unwrap();
            }
            assert_eq!(ns.list_keys("note:", 10).unwrap(), ["note:a", "note:b"]);
            assert_eq!(ns.list_keys("note", 2).unwrap(), ["note", "note:a"]);
            assert_eq!(ns.list_keys("%", 10).unwrap(), Vec::<String>::new());
            store
                .namespace("channel:c", "p")
                .set("k", b"v", None)
                .unwrap();
            assert_eq!(store.owners_of("p").unwrap(), ["channel:c", "workspace:w"]);
            assert!(store.owners_of("q").unwrap().is_empty());
        });
    }

    /// Two daemons' plugin instances counting with compare-and-set on one
    /// key: each version is written once, so no increment is lost.
    #[test]
    fn compare_and_set_from_two_daemons_at_once_loses_no_write() {
        let at = database();
        let daemons = [
            KvStore::open_at(&at).unwrap(),
            KvStore::open_at(&at).unwrap(),
        ];
        let won = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for store in &daemons {
                for _ in 0..2 {
                    let ns = store.namespace("workspace:w", "counter");
                    let won = &won;
                    s.spawn(move || {
                        for _ in 0..25 {
                            let (expected, n) = ns.get("n").unwrap().map_or((None, 0), |e| {
                                let n: u64 = String::from_utf8(e.value).unwrap().parse().unwrap();
                                (Some(e.version), n)
                            });
                            let next = (n + 1).to_string();
                            if ns
                                .compare_and_set("n", expected, next.as_bytes(), None)
                                .unwrap()
                                .is_some()
                            {
                                won.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    });
                }
            }
        });
        let won = won.into_inner();
        assert!(won > 0);
        let entry = daemons[1]
            .namespace("workspace:w", "counter")
            .get("n")
            .unwrap()
            .unwrap();
        assert_eq!(entry.version, won);
        assert_eq!(entry.value, won.to_string().into_bytes());
    }
}
