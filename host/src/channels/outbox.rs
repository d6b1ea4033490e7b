//! The outbox worker: delivers queued replies through their channel's
//! `send`, retries transient failures with backoff (honouring the
//! platform's `Retry-After`), gives up on permanent ones (audited), and
//! stores each platform receipt.

use std::sync::Arc;
use std::time::Duration;

use crate::audit::AuditLog;
use crate::db::now_ms;
use crate::plugins::api;

use super::ChannelHost;
use super::store::OutboxRow;

/// Attempts before a transient failure is given up.
pub const MAX_ATTEMPTS: u32 = 12;
/// How long a claimed row stays this worker's: a send takes at most the
/// plugin's call timeout (5 s by default), so a dead worker's rows are free
/// again soon.
const LEASE_MS: i64 = 2 * 60 * 1000;
/// Rows delivered at once (each from a different conversation).
const BATCH: usize = 32;
/// The longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The longest idle wait: rows another process queues (`pincer pairing
/// approve` telling the sender) go out within it. One indexed read.
const IDLE_POLL: Duration = Duration::from_secs(2);

/// Runs until `stop` resolves; then returns after the rows in flight.
/// Claims rows as `cluster`'s daemon; whenever a daemon leaves the cluster
/// (or at start, one that was killed), frees the rows it had claimed.
pub async fn run(
    host: Arc<ChannelHost>,
    audit: Arc<AuditLog>,
    cluster: Arc<dyn crate::cluster::Membership>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let owner = cluster.id().to_owned();
    // The daemons alive at the last look; none yet at start.
    let mut alive: Option<Vec<String>> = None;
    loop {
        let now_alive = cluster.alive();
        if alive
            .as_ref()
            .is_none_or(|was| was.iter().any(|id| !now_alive.contains(id)))
        {
            match host.store.release_claims_of_the_gone(&now_alive) {
                Ok(0) => {}
                Ok(n) => tracing::warn!(
                    "outbox: {n} row(s) claimed by a daemon that stopped are free again"
                ),
                Err(e) => tracing::error!("outbox: cannot release old claims: {e}"),
            }
        }
        alive = Some(now_alive);
        // Claiming takes the database's write lock: an idle daemon reads
        // first, so it never waits for (or logs against) a lock held by
        // another process while it has nothing to send.
        let next = host.store.next_due_ms();
        let due = match &next {
            Ok(next) => next.is_some_and(|at| at <= now_ms()),
            Err(_) => true,
        };
        let delivered = if due {
            deliver_due(&host, &audit, &owner).await
        } else {
            0
        };
        if *stop.borrow() {
            return;
        }
        if delivered > 0 {
            continue;
        }
        // Read again only when this pass tried to deliver.
        let next = if due { host.store.next_due_ms() } else { next };
        let wait = match next {
            Ok(Some(due)) => Duration::from_millis(u64::try_from(due - now_ms()).unwrap_or(0)),
            Ok(None) => IDLE_POLL,
            Err(e) => {
                tracing::error!("outbox: {e}");
                Duration::from_secs(5)
            }
        }
        .min(IDLE_POLL);
        tokio::select! {
            () = host.outbox_wake.notified() => {}
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => {}
        }
    }
}

/// Delivers what is due now; returns how many rows were attempted.
pub async fn deliver_due(host: &Arc<ChannelHost>, audit: &AuditLog, owner: &str) -> usize {
    let rows = match host.store.claim_due(owner, LEASE_MS, BATCH) {
        Ok(rows) => rows,
        Err(e) => {
            tracing::error!("outbox: cannot claim rows: {e}");
            return 0;
        }
    };
    let count = rows.len();
    futures_util::future::join_all(rows.into_iter().map(|row| deliver(host, audit, row))).await;
    count
}

enum Verdict {
    Sent(String),
    Retry { after: Duration, why: String },
    GiveUp(String),
}

async fn deliver(host: &ChannelHost, audit: &AuditLog, row: OutboxRow) {
    let verdict = match host.get(&row.channel) {
        None => Verdict::GiveUp(format!("channel `{}` is no longer configured", row.channel)),
        Some(channel) => {
            let message = api::Outbound {
                conversation: row.conversation.clone(),
                thread: row.thread.clone(),
                text: row.text.clone(),
                reply_to: row.reply_to.clone(),
                actions: row.actions.iter().map(action).collect(),
                visible_to: row.visible_to.clone(),
            };
            match (&row.file, row.replaces) {
                (Some(file), _) => send_file(host, channel, &row, file).await,
                (None, None) => judge(
                    host.plugins.channel_send(&channel.plugin, &message).await,
                    row.attempts,
                ),
                (None, Some(original)) => match replaced_receipt(host, original, row.attempts) {
                    Ok(receipt) => judge(
                        host.plugins
                            .channel_update(&channel.plugin, &receipt, &message)
                            .await,
                        row.attempts,
                    ),
                    Err(verdict) => verdict,
                },
            }
        }
    };
    let stored = match &verdict {
        Verdict::Sent(receipt) => host.store.delivered(row.id, receipt),
        Verdict::Retry { after, why } => {
            tracing::warn!(channel = %row.channel, id = row.id, "delivery failed, retrying in {after:?}: {why}");
            let at = now_ms() + i64::try_from(after.as_millis()).unwrap_or(i64::MAX / 2);
            host.store.retry_at(row.id, at, why)
        }
        Verdict::GiveUp(why) => {
            tracing::error!(channel = %row.channel, id = row.id, "delivery given up: {why}");
            audit.record(
                crate::audit::Actor::Channel(&row.channel),
                None,
                crate::audit::Action::ChannelDeliveryFailed,
                &format!(
                    "outbox row {} to conversation {} after {} attempt(s): {why}",
                    row.id,
                    row.conversation,
                    row.attempts + 1
                ),
            );
            host.store.give_up(row.id, why)
        }
    };
    if let Err(e) = stored {
        tracing::error!(channel = %row.channel, id = row.id, "outbox: cannot record the outcome: {e}");
    }
}

/// Sends the file of `row` (its text is the comment).
async fn send_file(
    host: &ChannelHost,
    channel: &super::LoadedChannel,
    row: &OutboxRow,
    file: &super::OutboxFile,
) -> Verdict {
    if file.size > channel.info.max_upload_bytes {
        return Verdict::GiveUp(if channel.info.max_upload_bytes == 0 {
            format!("channel `{}` sends no files", row.channel)
        } else {
            format!(
                "the file is {} bytes; channel `{}` sends at most {}",
                file.size, row.channel, channel.info.max_upload_bytes
            )
        });
    }
    let bytes = match host.store.outbox_file_bytes(row.id) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Verdict::GiveUp("the file's bytes are no longer stored".into()),
        Err(e) => return transient(format!("the file cannot be read: {e}"), row.attempts),
    };
    let outbound = api::OutboundFile {
        conversation: row.conversation.clone(),
        thread: row.thread.clone(),
        reply_to: row.reply_to.clone(),
        name: file.name.clone(),
        media_type: file.media_type.clone(),
        size: file.size,
        comment: (!row.text.is_empty()).then(|| row.text.clone()),
    };
    let upload = Arc::new(crate::plugins::UploadFile {
        name: file.name.clone(),
        media_type: file.media_type.clone(),
        bytes,
    });
    judge(
        host.plugins
            .channel_send_file(&channel.plugin, &outbound, upload)
            .await,
        row.attempts,
    )
}

fn action(button: &super::Button) -> api::Action {
    api::Action {
        id: button.id.clone(),
        label: button.label.clone(),
        style: match button.style {
            super::ButtonStyle::Plain => api::ActionStyle::Plain,
            super::ButtonStyle::Primary => api::ActionStyle::Primary,
            super::ButtonStyle::Danger => api::ActionStyle::Danger,
        },
    }
}

/// The platform id of the message outbox row `original` became; rows of
/// one conversation go out in order, so it was delivered (or given up)
/// before a row replacing it is claimed.
fn replaced_receipt(host: &ChannelHost, original: i64, attempts: u32) -> Result<String, Verdict> {
    let rows = host.store.outbox_rows(&[original]).map_err(|e| {
        transient(
            format!("the message to replace cannot be read: {e}"),
            attempts,
        )
    })?;
    match rows.into_iter().next() {
        Some(OutboxRow {
            receipt: Some(receipt),
            ..
        }) if !receipt.is_empty() => Ok(receipt),
        Some(row) if row.state == super::OutboxState::Pending => Err(transient(
            format!("the message to replace (outbox row {original}) is not delivered yet"),
            attempts,
        )),
        _ => Err(Verdict::GiveUp(format!(
            "the message to replace (outbox row {original}) was never delivered or is gone"
        ))),
    }
}

fn judge(
    outcome: Result<Result<api::Delivery, api::ChannelError>, crate::plugins::PluginError>,
    attempts: u32,
) -> Verdict {
    use api::ChannelError as E;
    let transient = |why| transient(why, attempts);
    match outcome {
        Ok(Ok(delivery)) => Verdict::Sent(delivery.id),
        Ok(Err(E::RetryLater(r))) => Verdict::Retry {
            after: Duration::from_millis(u64::from(r.after_ms)).min(MAX_BACKOFF),
            why: format!("the platform asked to retry later: {}", r.reason),
        },
        Ok(Err(E::Upstream(m))) => transient(format!("the platform failed: {m}")),
        Ok(Err(E::Rejected(m))) => Verdict::GiveUp(format!("the platform refused: {m}")),
        Ok(Err(E::Unauthorized(m))) => Verdict::GiveUp(format!("unauthorized: {m}")),
        Ok(Err(E::BadRequest(m))) => Verdict::GiveUp(format!("bad request: {m}")),
        Ok(Err(E::Unsupported(m))) => Verdict::GiveUp(format!("unsupported: {m}")),
        Err(e) => transient(e.to_string()),
    }
}

/// Another attempt after a backoff, unless this was the last one.
fn transient(why: String, attempts: u32) -> Verdict {
    if attempts + 1 >= MAX_ATTEMPTS {
        Verdict::GiveUp(format!("{why} (after {MAX_ATTEMPTS} attempts)"))
    } else {
        Verdict::Retry {
            after: backoff(attempts),
            why,
        }
    }
}

/// 1 s, 2 s, 4 s … up to [`MAX_BACKOFF`].
fn backoff(attempts: u32) -> Duration {
    Duration::from_secs(1u64 << attempts.min(9)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_honoured_and_permanent_errors_are_not_retried() {
        let v = judge(
            Ok(Err(api::ChannelError::RetryLater(api::RetryAfter {
                after_ms: 3000,
                reason: "ratelimited".into(),
            }))),
            0,
        );
        assert!(matches!(v, Verdict::Retry { after, .. } if after == Duration::from_secs(3)));
        let v = judge(
            Ok(Err(api::ChannelError::Rejected("channel_not_found".into()))),
            0,
        );
        assert!(matches!(v, Verdict::GiveUp(_)));
        let v = judge(Ok(Err(api::ChannelError::Upstream("502".into()))), 2);
        assert!(matches!(v, Verdict::Retry { after, .. } if after == Duration::from_secs(4)));
        let v = judge(
            Ok(Err(api::ChannelError::Upstream("502".into()))),
            MAX_ATTEMPTS - 1,
        );
        assert!(matches!(v, Verdict::GiveUp(_)));
    }
}
