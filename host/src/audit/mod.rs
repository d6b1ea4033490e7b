//! The audit log: denials, faults and policy decisions, stored in the host
//! database so they survive restarts.

mod event;

use std::path::Path;

use serde::Serialize;

use crate::args;
use crate::db::{Db, DbError, Location, Row, Value, now_ms};

pub use event::{Action, Actor};

#[derive(Debug, thiserror::Error)]
#[error("audit log: {0}")]
pub struct AuditError(#[from] DbError);

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
    db: Db,
    /// The id of the last event this process recorded, for live tails.
    recorded: tokio::sync::watch::Sender<i64>,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS audit_events (
        id INTEGER PRIMARY KEY,
        timestamp_ms INTEGER NOT NULL,
        actor TEXT NOT NULL,
        workspace TEXT,
        kind TEXT NOT NULL,
        detail TEXT NOT NULL
    );
    CREATE INDEX IF NOT EXISTS audit_events_by_actor ON audit_events (actor, id);";

/// The most of an event's detail that is stored: details quote what callers
/// sent (a model alias, a tool name), and a queued record must stay small.
pub const MAX_DETAIL_BYTES: usize = 16 * 1024;

/// `detail` as it is stored, by [`AuditLog`] and by the gateway's writer
/// alike: a NUL as U+FFFD (PostgreSQL's text cannot hold NUL, and an event
/// refused for one would be lost, on both backends the same), and cut to
/// [`MAX_DETAIL_BYTES`], saying how much was cut.
pub fn stored_detail(detail: &str) -> String {
    let kept = &detail[..detail.floor_char_boundary(MAX_DETAIL_BYTES)];
    let mut stored = kept.replace('\0', "\u{FFFD}");
    if kept.len() < detail.len() {
        stored.push_str(&format!("… ({} bytes cut)", detail.len() - kept.len()));
    }
    stored
}

const EVENT_COLUMNS: &str = "timestamp_ms, actor, workspace, kind, detail";

impl AuditLog {
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        Self::open_at(&Location::from(path))
    }

    pub fn open_at(location: &Location) -> Result<Self, AuditError> {
        let db = Db::open(location)?;
        db.transaction(|conn| conn.schema(SCHEMA))?;
        Ok(Self {
            db,
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
        self.insert(&actor.to_string(), workspace, action, detail);
    }

    /// [`Self::record`] from async code on any runtime: the write waits for
    /// the database on a blocking thread, so a lock another process holds
    /// does not stall a one-thread runtime (`pincer gateway serve`). The
    /// event is written when this returns, as with `record`.
    pub async fn record_async(
        self: &std::sync::Arc<Self>,
        actor: Actor<'_>,
        workspace: Option<&str>,
        action: Action,
        detail: &str,
    ) {
        let log = self.clone();
        let actor = actor.to_string();
        let workspace = workspace.map(str::to_owned);
        let detail = detail.to_owned();
        let written = tokio::task::spawn_blocking(move || {
            log.insert(&actor, workspace.as_deref(), action, &detail);
        })
        .await;
        if let Err(e) = written {
            tracing::error!(
                kind = action.as_str(),
                "cannot record audit event: the writing task ended: {e}"
            );
        }
    }

    fn insert(&self, actor: &str, workspace: Option<&str>, action: Action, detail: &str) {
        let kind = action.as_str();
        let detail = stored_detail(detail);
        let inserted = self.db.run(|conn| -> Result<i64, DbError> {
            conn.query_one(
                "INSERT INTO audit_events (timestamp_ms, actor, workspace, kind, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5) RETURNING id",
                args![now_ms(), actor, workspace, kind, &detail],
            )?
            .get(0)
        });
        match inserted {
            Ok(id) => {
                self.recorded.send_replace(id);
            }
            Err(e) => tracing::error!(%actor, kind, "cannot record audit event: {e}"),
        }
    }

    /// Deletes the events recorded before `before_ms` (with `dry_run` only
    /// counts them); returns how many.
    pub fn prune(&self, before_ms: i64, dry_run: bool) -> Result<usize, AuditError> {
        self.db.run(|conn| {
            if dry_run {
                return Ok(conn
                    .query_one(
                        "SELECT COUNT(*) FROM audit_events WHERE timestamp_ms < ?1",
                        args![before_ms],
                    )?
                    .get(0)?);
            }
            Ok(conn.execute(
                "DELETE FROM audit_events WHERE timestamp_ms < ?1",
                args![before_ms],
            )?)
        })
    }

    /// The newest events of `kinds`, of one workspace when given.
    pub fn of_kinds(
        &self,
        kinds: &[Action],
        workspace: Option<&str>,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, AuditError> {
        if kinds.is_empty() {
            return Ok(Vec::new());
        }
        // ?1 and ?2, then one parameter per kind.
        let listed: Vec<String> = (3..3 + kinds.len()).map(|i| format!("?{i}")).collect();
        let mut args = vec![Value::from(workspace), Value::from(limit)];
        args.extend(kinds.iter().map(|k| Value::from(k.as_str())));
        self.events(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM audit_events
                 WHERE kind IN ({}) AND (CAST(?1 AS TEXT) IS NULL OR workspace = ?1)
                 ORDER BY id DESC LIMIT ?2",
                listed.join(", ")
            ),
            &args,
        )
    }

    /// The newest events about one workspace (by it, or recorded for it).
    pub fn for_workspace(
        &self,
        workspace: &str,
        limit: u32,
    ) -> Result<Vec<AuditEvent>, AuditError> {
        self.events(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM audit_events
                 WHERE workspace = ?1 OR actor = 'workspace:' || ?1 ORDER BY id DESC LIMIT ?2"
            ),
            args![workspace, limit],
        )
    }

    /// The newest events first, optionally only those of one actor.
    pub fn recent(&self, actor: Option<&str>, limit: u32) -> Result<Vec<AuditEvent>, AuditError> {
        self.events(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM audit_events
                 WHERE CAST(?1 AS TEXT) IS NULL OR actor = ?1 ORDER BY id DESC LIMIT ?2"
            ),
            args![actor, limit],
        )
    }

    /// Events matching `filter`: newest first, or oldest first after
    /// `after_id`.
    pub fn page(&self, filter: &AuditFilter) -> Result<Vec<AuditRow>, AuditError> {
        let order = if filter.after_id.is_some() {
            "ASC"
        } else {
            "DESC"
        };
        let sql = format!(
            "SELECT id, {EVENT_COLUMNS} FROM audit_events
             WHERE (CAST(?1 AS TEXT) IS NULL OR workspace = ?1)
               AND (CAST(?2 AS TEXT) IS NULL OR kind = ?2
                    OR substr(kind, 1, length(CAST(?2 AS TEXT)) + 1) = ?2 || '.')
               AND (CAST(?3 AS TEXT) IS NULL OR actor = ?3)
               AND (CAST(?4 AS BIGINT) IS NULL OR id > ?4)
               AND (CAST(?5 AS BIGINT) IS NULL OR id < ?5)
             ORDER BY id {order} LIMIT ?6"
        );
        let args = args![
            &filter.workspace,
            &filter.kind,
            &filter.actor,
            filter.after_id,
            filter.before_id,
            filter.limit,
        ];
        self.db.run(|conn| {
            conn.query(&sql, args)?
                .iter()
                .map(|r| {
                    Ok(AuditRow {
                        id: r.get(0)?,
                        event: event(r, 1)?,
                    })
                })
                .collect()
        })
    }

    fn events(&self, sql: &str, args: &[Value]) -> Result<Vec<AuditEvent>, AuditError> {
        self.db.run(|conn| {
            conn.query(sql, args)?
                .iter()
                .map(|r| Ok(event(r, 0)?))
                .collect()
        })
    }
}

/// The event in `r`'s [`EVENT_COLUMNS`], which begin at column `first`.
fn event(r: &Row, first: usize) -> Result<AuditEvent, DbError> {
    Ok(AuditEvent {
        timestamp_ms: r.get(first)?,
        actor: r.get(first + 1)?,
        workspace: r.get(first + 2)?,
        kind: r.get(first + 3)?,
        detail: r.get(first + 4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::each_backend;

    #[test]
    fn events_survive_reopening() {
        each_backend(|at| {
            AuditLog::open_at(at).unwrap().record(
                Actor::Plugin("x"),
                None,
                Action::PluginDenied,
                "GET http://evil/",
            );
            let log = AuditLog::open_at(at).unwrap();
            let events = log.recent(Some("plugin:x"), 10).unwrap();
            assert_eq!(events.len(), 1);
            assert_eq!(events[0].kind, "plugin.denied");
            assert!(log.recent(Some("plugin:y"), 10).unwrap().is_empty());
        });
    }

    #[test]
    fn events_are_paged_filtered_and_pruned_alike_on_both_backends() {
        each_backend(|at| {
            let log = AuditLog::open_at(at).unwrap();
            let seen = log.subscribe();
            log.record(Actor::Plugin("x"), Some("dev"), Action::EgressAllowed, "a");
            log.record(Actor::Workspace("dev"), None, Action::EgressRefused, "b");
            log.record(Actor::Host, Some("ops"), Action::ApprovalGranted, "c");
            log.record(Actor::Host, None, Action::ApprovalRuleRevoked, "d\0");
            let details = |events: Vec<AuditEvent>| -> Vec<String> {
                events.into_iter().map(|e| e.detail).collect()
            };
            let page = |filter: AuditFilter| -> Vec<String> {
                log.page(&AuditFilter {
                    limit: 10,
                    ..filter
                })
                .unwrap()
                .into_iter()
                .map(|r| r.event.detail)
                .collect()
            };
            let newest = log.page(&AuditFilter {
                limit: 1,
                ..AuditFilter::default()
            });
            assert_eq!(newest.unwrap()[0].id, *seen.borrow());

            assert_eq!(
                details(log.recent(None, 10).unwrap()),
                ["d\u{FFFD}", "c", "b", "a"]
            );
            assert_eq!(details(log.for_workspace("dev", 10).unwrap()), ["b", "a"]);
            let egress = [Action::EgressAllowed, Action::EgressRefused];
            assert_eq!(
                details(log.of_kinds(&egress, None, 10).unwrap()),
                ["b", "a"]
            );
            assert_eq!(
                details(log.of_kinds(&egress, Some("dev"), 10).unwrap()),
                ["a"]
            );
            assert!(log.of_kinds(&[], None, 10).unwrap().is_empty());

            let kind = |k: &str| AuditFilter {
                kind: Some(k.into()),
                ..AuditFilter::default()
            };
            assert_eq!(page(kind("approval")), ["d\u{FFFD}", "c"]);
            assert_eq!(page(kind("approval.granted")), ["c"]);
            assert!(page(kind("approv")).is_empty());
            assert!(page(kind("Approval")).is_empty());
            let by = AuditFilter {
                actor: Some("host".into()),
                workspace: Some("ops".into()),
                ..AuditFilter::default()
            };
            assert_eq!(page(by), ["c"]);
            let ids: Vec<i64> = log
                .page(&AuditFilter {
                    limit: 10,
                    ..AuditFilter::default()
                })
                .unwrap()
                .iter()
                .map(|r| r.id)
                .collect();
            let after = AuditFilter {
                after_id: Some(ids[3]),
                ..AuditFilter::default()
            };
            assert_eq!(
                page(after),
                ["b", "c", "d\u{FFFD}"],
                "oldest first after an id"
            );
            let before = AuditFilter {
                before_id: Some(ids[1]),
                ..AuditFilter::default()
            };
            assert_eq!(page(before), ["b", "a"]);

            assert_eq!(log.prune(i64::MAX, true).unwrap(), 4);
            assert_eq!(log.prune(0, false).unwrap(), 0);
            assert_eq!(log.prune(i64::MAX, false).unwrap(), 4);
            assert!(log.recent(None, 10).unwrap().is_empty());
        });
    }
}
