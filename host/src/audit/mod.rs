//! The audit log: denials, faults and policy decisions, stored in the host
//! database so they survive restarts.

mod event;

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, params};

use crate::db::now_ms;
use serde::Serialize;

pub use event::{Action, Actor};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditEvent {
    pub timestamp_ms: i64,
    /// Who acted: `plugin:<name>`, `workspace:<name>`, `host`.
    pub actor: String,
    pub workspace: Option<String>,
    /// Dotted kind, e.g. `plugin.denied`, `plugin.fault`.
    pub kind: String,
    pub detail: String,
}

/// Which events [`AuditLog::page`] returns; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub workspace: Option<String>,
    /// A kind (`approval.granted`) or its family (`approval`).
    pub kind: Option<String>,
    pub actor: Option<String>,
    /// Newer than this id, oldest first (a live tail).
    pub after_id: Option<i64>,
    /// Older than this id, newest first (the next page).
    pub before_id: Option<i64>,
    pub limit: u32,
}

/// A stored event with its row id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRow {
    pub id: i64,
    #[serde(flatten)]
    pub event: AuditEvent,
}

pub struct AuditLog {
    conn: Mutex<Connection>,
    /// The id of the last event this process recorded, for live tails.
    recorded: tokio::sync::watch::Sender<i64>,
}

impl AuditLog {
    /// MERGE-SHIM: replaced by the ported audit log's own `open_at`.
    pub fn open_at(at: &crate::db::Location) -> Result<(), crate::db::DbError> {
        match at {
            crate::db::Location::Sqlite(path) => Self::open(path).map(drop).map_err(Into::into),
            crate::db::Location::Postgres(_) => crate::db::Db::open(at)?.run(|c| {
                c.schema(
                    "CREATE TABLE IF NOT EXISTS audit_events (
                        id INTEGER PRIMARY KEY, timestamp_ms INTEGER NOT NULL, actor TEXT NOT NULL,
                        workspace TEXT, kind TEXT NOT NULL, detail TEXT NOT NULL)",
                )
            }),
        }
    }

    pub fn open(path: &Path) -> rusqlite::Result<Self> {
        let conn = crate::db::open(path)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS audit_events (
                id INTEGER PRIMARY KEY,
                timestamp_ms INTEGER NOT NULL,
                actor TEXT NOT NULL,
                workspace TEXT,
                kind TEXT NOT NULL,
                detail TEXT NOT NULL
            );
            CREATE INDEX IF NOT EXISTS audit_events_by_actor ON audit_events (actor, id);",
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
            recorded: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Changes when this process records an event (events other processes
    /// record are seen by whoever reads the table again).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<i64> {
        self.recorded.subscribe()
    }

    /// Records an event; failures to record are logged, never raised, so
    /// auditing cannot break the action being audited.
    pub fn record(&self, actor: Actor<'_>, workspace: Option<&str>, action: Action, detail: &str) {
        let actor = actor.to_string();
        let kind = action.as_str();
        let result = self
            .conn
            .lock()
            .map_err(|_| "lock poisoned".to_string())
            .and_then(|conn| {
                conn.execute(
                    "INSERT INTO audit_events (timestamp_ms, actor, workspace, kind, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![now_ms(), &actor, workspace, kind, detail],
                )
                .map(|_| self.recorded.send_replace(conn.last_insert_rowid()))
                .map_err(|e| e.to_string())
            });
        if let Err(e) = result {
            tracing::error!(%actor, kind, "cannot record audit event: {e}");
        }
    }

    /// Deletes the events recorded before `before_ms` (with `dry_run` only
    /// counts them); returns how many.
    pub fn prune(&self, before_ms: i64, dry_run: bool) -> rusqlite::Result<usize> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| rusqlite::Error::InvalidQuery)?;
        if dry_run {
            let n: i64 = conn.query_row(
                "SELECT COUNT(*) FROM audit_events WHERE timestamp_ms < ?1",
                [before_ms],
                |r| r.get(0),
            )?;
            return Ok(usize::try_from(n).unwrap_or(0));
        }
        conn.execute(
            "DELETE FROM audit_events WHERE timestamp_ms < ?1",
            [before_ms],
        )
    }

    /// The newest events of `kinds`, of one workspace when given.
    pub fn of_kinds(
        &self,
        kinds: &[Action],
        workspace: Option<&str>,
        limit: u32,
    ) -> rusqlite::Result<Vec<AuditEvent>> {
        let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
        self.query(
            "SELECT timestamp_ms, actor, workspace, kind, detail FROM audit_events
             WHERE kind IN (SELECT value FROM json_each(?1)) AND (?2 IS NULL OR workspace = ?2)
             ORDER BY id DESC LIMIT ?3",
            params![serde_json::json!(kinds).to_string(), workspace, limit],
        )
    }

    /// The newest events about one workspace (by it, or recorded for it).
    pub fn for_workspace(&self, workspace: &str, limit: u32) -> rusqlite::Result<Vec<AuditEvent>> {
        self.query(
            "SELECT timestamp_ms, actor, workspace, kind, detail FROM audit_events
             WHERE workspace = ?1 OR actor = 'workspace:' || ?1 ORDER BY id DESC LIMIT ?2",
            params![workspace, limit],
        )
    }

    /// The newest events first, optionally only those of one actor.
    pub fn recent(&self, actor: Option<&str>, limit: u32) -> rusqlite::Result<Vec<AuditEvent>> {
        self.query(
            "SELECT timestamp_ms, actor, workspace, kind, detail FROM audit_events
             WHERE ?1 IS NULL OR actor = ?1 ORDER BY id DESC LIMIT ?2",
            params![actor, limit],
        )
    }

    /// Events matching `filter`: newest first, or oldest first after
    /// `after_id`.
    pub fn page(&self, filter: &AuditFilter) -> rusqlite::Result<Vec<AuditRow>> {
        let order = if filter.after_id.is_some() {
            "ASC"
        } else {
            "DESC"
        };
        let sql = format!(
            "SELECT id, timestamp_ms, actor, workspace, kind, detail FROM audit_events
             WHERE (?1 IS NULL OR workspace = ?1)
               AND (?2 IS NULL OR kind = ?2 OR kind LIKE ?2 || '.%')
               AND (?3 IS NULL OR actor = ?3)
               AND (?4 IS NULL OR id > ?4) AND (?5 IS NULL OR id < ?5)
             ORDER BY id {order} LIMIT ?6"
        );
        let conn = self
            .conn
            .lock()
            .map_err(|_| rusqlite::Error::InvalidQuery)?;
        let mut stmt = conn.prepare_cached(&sql)?;
        stmt.query_map(
            params![
                filter.workspace,
                filter.kind,
                filter.actor,
                filter.after_id,
                filter.before_id,
                filter.limit
            ],
            |r| {
                Ok(AuditRow {
                    id: r.get(0)?,
                    event: AuditEvent {
                        timestamp_ms: r.get(1)?,
                        actor: r.get(2)?,
                        workspace: r.get(3)?,
                        kind: r.get(4)?,
                        detail: r.get(5)?,
                    },
                })
            },
        )?
        .collect()
    }

    fn query(&self, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<Vec<AuditEvent>> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| rusqlite::Error::InvalidQuery)?;
        let mut stmt = conn.prepare_cached(sql)?;
        stmt.query_map(params, |r| {
            Ok(AuditEvent {
                timestamp_ms: r.get(0)?,
                actor: r.get(1)?,
                workspace: r.get(2)?,
                kind: r.get(3)?,
                detail: r.get(4)?,
            })
        })?
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        AuditLog::open(&path).unwrap().record(
            Actor::Plugin("x"),
            None,
            Action::PluginDenied,
            "GET http://evil/",
        );
        let log = AuditLog::open(&path).unwrap();
        let events = log.recent(Some("plugin:x"), 10).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].kind, "plugin.denied");
        assert!(log.recent(Some("plugin:y"), 10).unwrap().is_empty());
    }
}
