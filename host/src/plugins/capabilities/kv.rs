//! The `kv` capability: a key-value store private to each plugin, with TTL
//! and versioned compare-and-set, kept in the host database.

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

/// The shared store; hand each plugin its own [`KvNamespace`].
pub struct KvStore {
    conn: Mutex<Connection>,
}

impl KvStore {
    pub fn open(path: &Path) -> rusqlite::Result<Arc<Self>> {
        let conn = crate::db::open(path)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS plugin_kv (
                plugin TEXT NOT NULL,
                key TEXT NOT NULL,
                value BLOB NOT NULL,
                version INTEGER NOT NULL,
                expires_at_ms INTEGER,
                PRIMARY KEY (plugin, key)
            ) WITHOUT ROWID;",
        )?;
        Ok(Arc::new(Self {
            conn: Mutex::new(conn),
        }))
    }

    pub fn namespace(self: &Arc<Self>, plugin: &str) -> KvNamespace {
        KvNamespace {
            store: self.clone(),
            plugin: plugin.to_string(),
        }
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

#[derive(Clone)]
pub struct KvNamespace {
    store: Arc<KvStore>,
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
                "DELETE FROM plugin_kv WHERE plugin = ?1 AND key = ?2",
                params![self.plugin, key],
            )?;
            Ok(existed)
        })
    }

    pub fn list_keys(&self, prefix: &str, limit: u32) -> Result<Vec<String>, KvError> {
        self.store.with_conn(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT key FROM plugin_kv
                 WHERE plugin = ?1 AND substr(key, 1, length(?2)) = ?2
                   AND (expires_at_ms IS NULL OR expires_at_ms > ?3)
                 ORDER BY key LIMIT ?4",
            )?;
            let keys = stmt
                .query_map(
                    params![self.plugin, prefix, now_ms(), limit.min(1000)],
                    |row| row.get(0),
                )?
                .collect::<Result<Vec<String>, _>>()?;
            Ok(keys)
        })
    }

    fn live_entry(&self, conn: &Connection, key: &str) -> Result<Option<Entry>, KvError> {
        let row: Option<(Vec<u8>, i64, Option<i64>)> = conn
            .prepare_cached(
                "SELECT value, version, expires_at_ms FROM plugin_kv WHERE plugin = ?1 AND key = ?2",
            )?
            .query_row(params![self.plugin, key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        match row {
            Some((_, _, Some(expires))) if expires <= now_ms() => {
                conn.execute(
                    "DELETE FROM plugin_kv WHERE plugin = ?1 AND key = ?2",
                    params![self.plugin, key],
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
                "SELECT count(*), coalesce(sum(length(value)), 0) FROM plugin_kv WHERE plugin = ?1",
            )?
            .query_row(params![self.plugin], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let replaced = current.map_or(0, |e| e.value.len() as i64);
        if current.is_none() && keys >= MAX_KEYS {
            return Err(KvError::QuotaExceeded(format!(
                "at most {MAX_KEYS} keys per plugin"
            )));
        }
        if bytes - replaced + value.len() as i64 > MAX_TOTAL_BYTES {
            return Err(KvError::QuotaExceeded(format!(
                "at most {MAX_TOTAL_BYTES} bytes per plugin"
            )));
        }
        let version = current.map_or(1, |e| e.version + 1);
        let expires = ttl_ms.map(|ttl| now_ms().saturating_add(ttl.min(i64::MAX as u64) as i64));
        conn.execute(
            "INSERT INTO plugin_kv (plugin, key, value, version, expires_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (plugin, key) DO UPDATE SET
               value = excluded.value, version = excluded.version,
               expires_at_ms = excluded.expires_at_ms",
            params![self.plugin, key, value, version as i64, expires],
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
        let a = store.namespace("a");
        let b = store.namespace("b");
        a.set("k", b"1", None).unwrap();
        assert_eq!(b.get("k").unwrap(), None);
        assert_eq!(a.get("k").unwrap().unwrap().value, b"1");
    }

    #[test]
    fn compare_and_set_follows_versions() {
        let (_dir, store) = store();
        let ns = store.namespace("p");
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
        let ns = store.namespace("p");
        ns.set("gone", b"x", Some(0)).unwrap();
        ns.set("kept", b"x", Some(60_000)).unwrap();
        assert_eq!(ns.get("gone").unwrap(), None);
        assert_eq!(ns.list_keys("", 10).unwrap(), vec!["kept".to_string()]);
    }

    #[test]
    fn bad_keys_and_big_values_are_refused() {
        let (_dir, store) = store();
        let ns = store.namespace("p");
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
