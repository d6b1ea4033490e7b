//! Pruning `pincer.db`: deletes what `state.retention` in `pincer.yaml` no
//! longer keeps (and cancelled agent tasks past their own retention). The
//! daemon prunes at start and then once a day; `pincer state prune` once.

use crate::db::Location;
use std::time::Duration;

use crate::audit::AuditLog;
use crate::channels::ChannelStore;
use crate::channels::Pruned;
use crate::config::Retention;
use crate::scheduler::Store as ScheduleStore;

/// How often the daemon prunes.
pub const PRUNE_EVERY: Duration = Duration::from_secs(24 * 3600);

/// What one prune removed (or would remove), per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    pub channels: Pruned,
    pub audit: usize,
    pub agent_tasks: usize,
    pub pairing_requests: usize,
}

fn before(now_ms: i64, period: Duration) -> i64 {
    now_ms.saturating_sub(i64::try_from(period.as_millis()).unwrap_or(i64::MAX))
}

/// Prunes the state at `db` as of `now_ms` by `retention`.
///
/// # Errors
/// When a table cannot be opened, read or changed.
pub fn prune(
    db: &Location,
    retention: &Retention,
    now_ms: i64,
    dry_run: bool,
) -> anyhow::Result<Report> {
    let channels = ChannelStore::open_at(db)?.prune(
        before(now_ms, retention.inbound.0),
        before(now_ms, retention.outbox.0),
        dry_run,
    )?;
    let audit = AuditLog::open_at(db)?.prune(before(now_ms, retention.audit.0), dry_run)?;
    let agent_tasks = ScheduleStore::open_at(db)?.purge_agent_tasks(now_ms, dry_run)?;
    let pairing_requests = crate::pairing::PairingStore::open_at(db)?
        .prune(before(now_ms, retention.inbound.0), dry_run)?;
    Ok(Report {
        channels,
        audit,
        agent_tasks,
        pairing_requests,
    })
}

/// The report as printed, one line per table.
pub fn lines(report: &Report, retention: &Retention, dry_run: bool) -> Vec<String> {
    let verb = if dry_run { "would remove" } else { "removed" };
    let period = |d: Duration| {
        let secs = d.as_secs();
        if secs.is_multiple_of(86_400) {
            format!("{}d", secs / 86_400)
        } else {
            humantime::format_duration(d).to_string()
        }
    };
    let c = &report.channels;
    vec![
        format!(
            "channel_inbound: {verb} {} message(s) older than {}; kept {} older one(s) not yet answered",
            c.inbound,
            period(retention.inbound.0),
            c.inbound_kept
        ),
        format!(
            "channel_outbox: {verb} {} row(s) older than {}; kept {} older one(s) not yet delivered or given up",
            c.outbox,
            period(retention.outbox.0),
            c.outbox_kept
        ),
        format!(
            "audit_events: {verb} {} event(s) older than {}",
            report.audit,
            period(retention.audit.0)
        ),
        format!(
            "schedule_agent_tasks: {verb} {} cancelled task(s) (kept {}, at most {} per workspace)",
            report.agent_tasks,
            period(crate::scheduler::agent::CANCELLED_RETENTION),
            crate::scheduler::agent::MAX_RETAINED
        ),
        format!(
            "pairing_requests: {verb} {} decided or expired request(s) older than {}",
            report.pairing_requests,
            period(retention.inbound.0)
        ),
    ]
}

/// The daemon's pruning: at start, then every [`PRUNE_EVERY`], until `stop`.
pub async fn prune_daily(
    db: Location,
    retention: Retention,
    audit: std::sync::Arc<AuditLog>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let path = db.clone();
        let done = tokio::task::spawn_blocking(move || {
            prune(&path, &retention, crate::db::now_ms(), false)
        })
        .await;
        match done {
            Ok(Ok(report)) => {
                let text = lines(&report, &retention, false).join("; ");
                tracing::info!("state prune: {text}");
                audit.record(
                    crate::audit::Actor::Pincer,
                    None,
                    crate::audit::Action::StatePruned,
                    &text,
                );
            }
            Ok(Err(e)) => tracing::error!("state prune: {e:#}"),
            Err(e) => tracing::error!("state prune: {e}"),
        }
        tokio::select! {
            () = tokio::time::sleep(PRUNE_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::{InboundState, OutboxState, Received, Reply};
    use std::path::Path;

    const DAY_MS: i64 = 24 * 3600 * 1000;

    fn received(id: &str, text: &str) -> Received {
        Received {
            channel: "slack".into(),
            conversation: "D1".into(),
            thread: None,
            message_id: id.into(),
            sender: "U1".into(),
            sender_name: None,
            text: text.into(),
            timestamp_ms: 1,
            files: Vec::new(),
        }
    }

    fn reply(part: &str) -> Reply {
        Reply {
            channel: "slack".into(),
            conversation: "D1".into(),
            thread: None,
            reply_to: None,
            parts: vec![part.into()],
            ..Reply::default()
        }
    }

    /// `state prune` removes old answered messages, delivered replies and
    /// old audit events, and keeps what is not answered or delivered yet
    /// whatever its age, and everything younger than its retention. The
    /// rows are made "old" by pruning as of 31 (and 181) days from now.
    #[test]
    fn prune_removes_old_rows_and_keeps_unanswered_ones() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join(crate::db::FILE_NAME);
        let store = ChannelStore::open(&db).expect("store");
        let audit = AuditLog::open(&db).expect("audit");
        // answered, reply delivered: prunable
        let done = store
            .receive(&received("1", "old question"), "ws", InboundState::Queued)
            .expect("db")
            .expect("new");
        let sent = store
            .finish(Some(done), InboundState::Done, &reply("old answer"))
            .expect("db");
        store.delivered(sent[0], "ts1").expect("db");
        // answered, reply still pending: kept, both
        let waiting = store
            .receive(&received("2", "asked"), "ws", InboundState::Queued)
            .expect("db")
            .expect("new");
        store
            .finish(Some(waiting), InboundState::Done, &reply("not sent yet"))
            .expect("db");
        // not answered at all: kept
        store
            .receive(&received("3", "still queued"), "ws", InboundState::Queued)
            .expect("db")
            .expect("new");
        let running = store
            .receive(&received("4", "in a turn"), "ws", InboundState::Queued)
            .expect("db")
            .expect("new");
        assert!(store.start(running).expect("db"));
        audit.record(
            crate::audit::Actor::Host,
            None,
            crate::audit::Action::StatePruned,
            "old",
        );
        // a pairing code approved (its sender stays allowed) and one left
        let pairing = crate::pairing::PairingStore::open(&db).expect("pairing");
        let crate::pairing::Asked::New(approved) = pairing.ask("slack", "U1", None).expect("ask")
        else {
            panic!("a new code");
        };
        pairing.approve(&approved.code, "op").expect("approve");
        pairing.ask("slack", "U2", None).expect("ask");

        let retention = Retention::default();
        let now = crate::db::now_ms();
        // nothing is older than its retention yet
        let today = prune(&Location::from(db.as_path()), &retention, now, false).expect("prune");
        assert_eq!(today, Report::default());

        let later = now + 31 * DAY_MS;
        let dry = prune(&Location::from(db.as_path()), &retention, later, true).expect("dry run");
        let want = Pruned {
            inbound: 1,
            inbound_kept: 3,
            outbox: 1,
            outbox_kept: 1,
        };
        assert_eq!(dry.channels, want);
        assert_eq!(dry.audit, 0, "audit events are kept 180 days");
        assert_eq!(dry.pairing_requests, 2);
        assert_eq!(
            lines(&dry, &retention, true),
            [
                "channel_inbound: would remove 1 message(s) older than 30d; kept 3 older one(s) not yet answered",
                "channel_outbox: would remove 1 row(s) older than 30d; kept 1 older one(s) not yet delivered or given up",
                "audit_events: would remove 0 event(s) older than 180d",
                "schedule_agent_tasks: would remove 0 cancelled task(s) (kept 7d, at most 20 per workspace)",
                "pairing_requests: would remove 2 decided or expired request(s) older than 30d",
            ]
            .map(str::to_owned)
        );
        assert_eq!(
            prune(&Location::from(db.as_path()), &retention, later, true)
                .expect("again")
                .channels,
            want,
            "a dry run removes nothing"
        );
        let pruned = prune(&Location::from(db.as_path()), &retention, later, false).expect("prune");
        assert_eq!(pruned.channels, want);
        assert_eq!(pruned.pairing_requests, 2);
        assert!(pairing.pending().expect("db").is_empty());
        assert!(
            pairing.allows("slack", "U1").expect("db"),
            "the approved sender stays"
        );
        assert_eq!(store.inbound(done).expect("db"), None, "answered, removed");
        assert!(store.inbound(waiting).expect("db").is_some());
        assert_eq!(
            store.inbound_in(InboundState::Queued).expect("db").len(),
            1,
            "the queued one stays"
        );
        assert_eq!(
            store
                .outbox("slack")
                .expect("db")
                .iter()
                .map(|r| (r.text.as_str(), r.state))
                .collect::<Vec<_>>(),
            [("not sent yet", OutboxState::Pending)]
        );

        let much_later = now + 181 * DAY_MS;
        let pruned =
            prune(&Location::from(db.as_path()), &retention, much_later, false).expect("prune");
        assert_eq!(pruned.audit, 1);
        assert!(audit.recent(None, 10).expect("audit").is_empty());
    }

    /// `state.retention` in pincer.yaml: the defaults as documented, a
    /// period as written, and a located error for one too short or not a
    /// period.
    #[test]
    fn retention_is_read_from_pincer_yaml() {
        let parse = |text: &str| {
            crate::config::Config::from_str_with_env(text, Path::new("pincer.yaml"), |_| None)
        };
        let days = |n: u64| Duration::from_secs(n * 86_400);
        let default = parse("").expect("empty").state.retention;
        assert_eq!(
            (default.inbound.0, default.outbox.0, default.audit.0),
            (days(30), days(30), days(180))
        );
        let set = parse("state:\n  retention: {audit: 2w, inbound: 12h}\n")
            .expect("parses")
            .state
            .retention;
        assert_eq!(
            (set.inbound.0, set.outbox.0, set.audit.0),
            (Duration::from_secs(12 * 3600), days(30), days(14))
        );
        let short = parse("state:\n  retention: {outbox: 10m}\n")
            .unwrap_err()
            .to_string();
        assert!(
            short.starts_with("pincer.yaml:2:")
                && short.contains("`10m` is shorter than an hour: write at least `1h`"),
            "{short}"
        );
        let bad = parse("state:\n  retention: {inbound: forever}\n")
            .unwrap_err()
            .to_string();
        assert!(
            bad.contains("invalid period `forever`") && bad.contains("write e.g. `30d`"),
            "{bad}"
        );
    }

    /// Finding 7 of issue 25: a refused sender's every message was stored
    /// with its text. A flood of 10,000 messages of 4 KiB each (40 MB of
    /// text) now leaves the database under 4 MiB, with no text in it.
    #[test]
    fn a_flood_from_a_refused_sender_stores_no_text() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join(crate::db::FILE_NAME);
        let store = ChannelStore::open(&db).expect("store");
        let text = "secret spam ".repeat(350);
        for i in 0..10_000 {
            store
                .receive(
                    &received(&format!("m{i}"), &text),
                    "ws",
                    InboundState::Refused,
                )
                .expect("db")
                .expect("new");
        }
        let conn = crate::db::open(&db).expect("open");
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .expect("checkpoint");
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        let bytes = size(&db) + size(&db.with_extension("db-wal"));
        assert!(bytes < 4 << 20, "{bytes} bytes for 10,000 refused messages");
        let stored: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM channel_inbound WHERE text LIKE '%secret spam%'",
                [],
                |r| r.get(0),
            )
            .expect("count");
        assert_eq!(stored, 0, "no text of a refused message is stored");
        let row = store.inbound(1).expect("db").expect("row");
        assert_eq!(row.state, InboundState::Refused);
        assert_eq!(
            row.text,
            crate::channels::refused_text(&text, InboundState::Refused),
            "its size and hash are"
        );
        assert!(
            row.text
                .starts_with("(refused, not stored: 4200 bytes, sha256 ")
        );
    }
}
