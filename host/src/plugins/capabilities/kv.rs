//! The `kv` capability: a key-value store private to each (owner, plugin)
//! pair, where the owner is a workspace or a channel, with TTL and versioned
//! compare-and-set, kept in the host database.

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};

use crate::db::now_ms;

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

impl From<rusqlite::Error> for KvError {
    fn from(e: rusqlite::Error) -> Self {
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
    conn: Mutex<Connection>,
}

/// Rows moved from the old per-plugin layout by [`KvStore::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Migrated {
    pub rows: usize,
}

impl KvStore {
    pub fn open(path: &Path) -> rusqlite::Result<Arc<Self>> {
        Self::open_migrating(path, "workspace:default").map(|(store, _)| store)
    }

    /// Opens the store; rows of the old layout (keyed by plugin only, from
    /// before per-workspace state) are assigned to `legacy_owner`, once.
    pub fn open_migrating(
        path: &Path,
        legacy_owner: &str,
    ) -> rusqlite::Result<(Arc<Self>, Migrated)> {
        let mut conn = crate::db::open(path)?;
        let migrated = migrate(&mut conn, legacy_owner)?;
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS plugin_kv ({KV_COLUMNS}) WITHOUT ROWID;"
        ))?;
        Ok((
            Arc::new(Self {
                conn: Mutex::new(conn),
            }),
            migrated,
        ))
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
        self.with_conn(|conn| {
            let mut stmt = conn
                .prepare("SELECT DISTINCT owner FROM plugin_kv WHERE plugin = ?1 ORDER BY owner")?;
            let owners = stmt
                .query_map(params![plugin], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(owners)
        })
    }

    fn with_conn<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, KvError>,
    ) -> Result<T, KvError> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| KvError::Storage("store lock poisoned".into()))?;
        f(&conn)
    }
}

/// Moves a `plugin_kv` table of the old layout (no `owner` column) into the
/// new one under `legacy_owner`, in one transaction. Returns the rows moved.
fn migrate(conn: &mut Connection, legacy_owner: &str) -> rusqlite::Result<Migrated> {
    let old_layout: bool = conn
        .prepare("SELECT 1 FROM pragma_table_info('plugin_kv') WHERE name = 'plugin'")?
        .exists([])?
        && !conn
            .prepare("SELECT 1 FROM pragma_table_info('plugin_kv') WHERE name = 'owner'")?
            .exists([])?;
    if !old_layout {
        return Ok(Migrated::default());
    }
    let tx = conn.transaction()?;
    tx.execute_batch(&format!(
        "CREATE TABLE plugin_kv_scoped ({KV_COLUMNS}) WITHOUT ROWID;"
    ))?;
    let rows = tx.execute(
        "INSERT INTO plugin_kv_scoped (owner, plugin, key, value, version, expires_at_ms)
         SELECT ?1, plugin, key, value, version, expires_at_ms FROM plugin_kv",
        params![legacy_owner],
    )?;
    tx.execute_batch("DROP TABLE plugin_kv; ALTER TABLE plugin_kv_scoped RENAME TO plugin_kv;")?;
    tx.commit()?;
    Ok(Migrated { rows })
}

#[derive(Clone)]
pub struct KvNamespace {
    store: Arc<KvStore>,
    owner: String,
    plugin: String,
}

impl KvNamespace {
    pub fn get(&self, key: &str) -> Result<Option<Entry>, KvError> {
        check_key(key)?;
        self.store.with_conn(|conn| self.live_entry(conn, key))
    }

    pub fn set(&self, key: &str, value: &[u8], ttl_ms: Option<u64>) -> Result<u64, KvError> {
        check_key(key)?;
        self.store.with_conn(|conn| {
            let current = self.live_entry(conn, key)?;
            self.write(conn, key, value, ttl_ms, current.as_ref())
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
        self.store.with_conn(|conn| {
            let current = self.live_entry(conn, key)?;
            if current.as_ref().map(|e| e.version) != expected {
                return Ok(None);
            }
            self.write(conn, key, value, ttl_ms, current.as_ref())
                .map(Some)
        })
    }

    pub fn delete(&self, key: &str) -> Result<bool, KvError> {
        check_key(key)?;
        self.store.with_conn(|conn| {
            let existed = self.live_entry(conn, key)?.is_some();
            conn.execute(
                "DELETE FROM plugin_kv WHERE owner = ?1 AND plugin = ?2 AND key = ?3",
                params![self.owner, self.plugin, key],
            )?;
            Ok(existed)
        })
    }

    pub fn list_keys(&self, prefix: &str, limit: u32) -> Result<Vec<String>, KvError> {
        self.store.with_conn(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT key FROM plugin_kv
                 WHERE owner = ?1 AND plugin = ?2 AND substr(key, 1, length(?3)) = ?3
                   AND (expires_at_ms IS NULL OR expires_at_ms > ?4)
                 ORDER BY key LIMIT ?5",
            )?;
            let keys = stmt
                .query_map(
                    params![self.owner, self.plugin, prefix, now_ms(), limit.min(1000)],
                    |row| row.get(0),
                )?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(keys)
        })
    }

    fn live_entry(&self, conn: &Connection, key: &str) -> Result<Option<Entry>, KvError> {
        let row: Option<(Vec<u8>, i64, Option<i64>)> = conn
            .prepare_cached(
                "SELECT value, version, expires_at_ms FROM plugin_kv
                 WHERE owner = ?1 AND plugin = ?2 AND key = ?3",
            )?
            .query_row(params![self.owner, self.plugin, key], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()?;
        match row {
            Some((_, _, Some(expires))) if expires <= now_ms() => {
                conn.execute(
                    "DELETE FROM plugin_kv WHERE owner = ?1 AND plugin = ?2 AND key = ?3",
                    params![self.owner, self.plugin, key],
                )?;
                Ok(None)
            }
            Some((value, version, _)) => Ok(Some(Entry {
                value,
                version: version as u64,
            })),
            None => Ok(None),
        }
    }

    fn write(
        &self,
        conn: &Connection,
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
        let (keys, bytes): (i64, i64) = conn
            .prepare_cached(
                "SELECT count(*), coalesce(sum(length(value)), 0) FROM plugin_kv
                 WHERE owner = ?1 AND plugin = ?2",
            )?
            .query_row(params![self.owner, self.plugin], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?;
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
            params![self.owner, self.plugin, key, value, version as i64, expires],
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

    fn store() -> (tempfile::TempDir, Arc<KvStore>) {
        let dir = tempfile::tempdir().unwrap();
        let store = KvStore::open(&dir.path().join("kv.db")).unwrap();
        (dir, store)
    }

    #[test]
    fn namespaces_are_separate() {
        let (_dir, store) = store();
        let a = store.namespace("workspace:w", "a");
        let b = store.namespace("workspace:w", "b");
        let other = store.namespace("workspace:v", "a");
        a.set("k", b"1", None).unwrap();
        assert_eq!(b.get("k").unwrap(), None);
        assert_eq!(other.get("k").unwrap(), None);
        assert!(other.list_keys("", 10).unwrap().is_empty());
        assert_eq!(a.get("k").unwrap().unwrap().value, b"1");
    }

    #[test]
    fn the_old_layout_is_assigned_to_the_legacy_owner_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kv.db");
        {
            let conn = Connection::open(&path).unwrap();
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
        let (_dir, store) = store();
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
    }

    #[test]
    fn entries_expire() {
        let (_dir, store) = store();
        let ns = store.namespace("workspace:w", "p");
        ns.set("gone", b"x", Some(0)).unwrap();
        ns.set("kept", b"x", Some(60_000)).unwrap();
        assert_eq!(ns.get("gone").unwrap(), None);
        assert_eq!(ns.list_keys("", 10).unwrap(), vec!["kept".to_string()]);
    }

    #[test]
    fn bad_keys_and_big_values_are_refused() {
        let (_dir, store) = store();
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
    }
}
