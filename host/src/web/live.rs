//! The console's live parts over Server-Sent Events: the audit log's tail
//! (the chat's feed is in `chat.rs`). A stream needs a signed-in session, sends a keepalive comment every 15 s,
//! and a session holds at most [`STREAMS_PER_SESSION`] at once.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Extension, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Console, WebSession};
use crate::audit::{AuditFilter, AuditRow};

pub const STREAMS_PER_SESSION: usize = 4;
pub(super) const KEEPALIVE: Duration = Duration::from_secs(15);
/// How often a tail reads the table when this process records nothing
/// (events another process, e.g. the CLI, records).
const REREAD: Duration = Duration::from_secs(2);

/// Open streams per session.
#[derive(Default)]
pub struct Streams(Arc<Mutex<HashMap<String, usize>>>);

/// One open stream; counted until dropped.
pub(super) struct Held {
    streams: Arc<Mutex<HashMap<String, usize>>>,
    session: String,
}

impl Streams {
    pub(super) fn hold(&self, session: &str) -> Option<Held> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(session.to_owned()).or_default();
        if *n >= STREAMS_PER_SESSION {
            return None;
        }
        *n += 1;
        Some(Held {
            streams: self.0.clone(),
            session: session.to_owned(),
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.session) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.session);
            }
        }
    }
}

#[derive(Deserialize, Default)]
pub struct TailQuery {
    workspace: Option<String>,
    kind: Option<String>,
    actor: Option<String>,
    /// Events after this id; the newest event's id when left out.
    after: Option<i64>,
}

struct Tail {
    console: Arc<Console>,
    filter: AuditFilter,
    recorded: tokio::sync::watch::Receiver<i64>,
    ready: VecDeque<AuditRow>,
    _held: Held,
}

pub async fn audit_tail(
    State(console): State<Arc<Console>>,
    Extension(session): Extension<WebSession>,
    Query(q): Query<TailQuery>,
) -> Response {
    let Some(held) = console.streams.hold(&session.id) else {
        return too_many_streams();
    };
    let blank = |t: Option<String>| t.filter(|t| !t.trim().is_empty());
    let after = match q.after {
        Some(after) => after,
        None => console
            .audit
            .page(&AuditFilter {
                limit: 1,
                ..AuditFilter::default()
            })
            .ok()
            .and_then(|rows| rows.first().map(|r| r.id))
            .unwrap_or(0),
    };
    let tail = Tail {
        recorded: console.audit.subscribe(),
        filter: AuditFilter {
            workspace: blank(q.workspace),
            kind: blank(q.kind),
            actor: blank(q.actor),
            after_id: Some(after),
            before_id: None,
            limit: 100,
        },
        console,
        ready: VecDeque::new(),
        _held: held,
    };
    let events = futures_util::stream::unfold(tail, |mut tail| async move {
        loop {
            if let Some(row) = tail.ready.pop_front() {
                tail.filter.after_id = Some(row.id);
                return Some((Ok::<_, Infallible>(event(&row)), tail));
            }
            match tail.console.audit.page(&tail.filter) {
                Ok(rows) if !rows.is_empty() => {
                    tail.ready.extend(rows);
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("audit tail: {e}"),
            }
            let mut stop = tail.console.stop.clone();
            tokio::select! {
                _ = tail.recorded.changed() => {}
                () = tokio::time::sleep(REREAD) => {}
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEPALIVE))
        .into_response()
}

pub(super) fn too_many_streams() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        "this browser has too many live streams open; close a console tab\n",
    )
        .into_response()
}

fn event(row: &AuditRow) -> Event {
    let data = serde_json::json!({
        "id": row.id,
        "when": crate::db::utc_text(row.event.timestamp_ms),
        "actor": row.event.actor,
        "workspace": row.event.workspace,
        "kind": row.event.kind,
        "detail": row.event.detail,
    });
    Event::default()
        .event("audit")
        .id(row.id.to_string())
        .data(data.to_string())
}
