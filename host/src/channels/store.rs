//! What channels keep in `pincer.db`: every inbound message (stored before
//! anything else happens to it, de-duplicated by its platform id) and the
//! outbox (a reply is a row before it is sent; its platform receipt is
//! stored when it is).
//!
//! Rows that a worker works on are claimed (owner and deadline), so a
//! daemon that dies mid-delivery leaves a claim that expires, never a row
//! that nobody will pick up again.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use crate::db::now_ms;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("channel store: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("channel store: lock poisoned by a panicked thread")]
    Poisoned,
}

/// An inbound message as received (before routing decisions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub channel: String,
    pub conversation: String,
    pub thread: Option<String>,
    pub message_id: String,
    pub sender: String,
    pub sender_name: Option<String>,
    pub text: String,
    pub timestamp_ms: u64,
    /// The files sent with it, fetched when its turn starts.
    pub files: Vec<StoredFile>,
}

/// A file of an inbound message, as stored with it (the channel's
/// `attachment`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StoredFile {
    pub id: String,
    pub name: String,
    pub media_type: Option<String>,
    pub size: Option<u64>,
    pub locator: String,
}

impl From<crate::plugins::api::Attachment> for StoredFile {
    fn from(f: crate::plugins::api::Attachment) -> Self {
        Self {
            id: f.id,
            name: f.name,
            media_type: f.media_type,
            size: f.size,
            locator: f.locator,
        }
    }
}

impl From<&StoredFile> for crate::plugins::api::Attachment {
    fn from(f: &StoredFile) -> Self {
        Self {
            id: f.id.clone(),
            name: f.name.clone(),
            media_type: f.media_type.clone(),
            size: f.size,
            locator: f.locator.clone(),
        }
    }
}

/// A file an outbox row sends (its bytes are stored beside the row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OutboxFile {
    pub name: String,
    pub media_type: String,
    pub size: u64,
}

/// Where an inbound message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InboundState {
    /// Waiting for its session's earlier messages.
    Queued,
    Running,
    /// Answered (the reply is in the outbox).
    Done,
    Failed,
    /// Its sender is not allowed.
    Refused,
    /// Over a per-sender or per-conversation rate limit: counted, not run.
    Dropped,
    /// The daemon stopped during its turn.
    Interrupted,
}

impl InboundState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Refused => "refused",
            Self::Dropped => "dropped",
            Self::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "running" => Self::Running,
            "done" => Self::Done,
            "failed" => Self::Failed,
            "refused" => Self::Refused,
            "dropped" => Self::Dropped,
            "interrupted" => Self::Interrupted,
            _ => Self::Queued,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InboundRow {
    pub id: i64,
    pub channel: String,
    pub conversation: String,
    pub thread: Option<String>,
    pub message_id: String,
    pub sender: String,
    pub sender_name: Option<String>,
    pub text: String,
    pub workspace: String,
    pub state: InboundState,
    pub received_ms: i64,
    pub turn_id: Option<String>,
    /// What the channel's `status` call returned for this message.
    pub status_handle: Option<String>,
    pub files: Vec<StoredFile>,
}

/// One message to deliver (one part of a reply split to the platform's limit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OutboxRow {
    pub id: i64,
    pub channel: String,
    pub conversation: String,
    pub thread: Option<String>,
    pub reply_to: Option<String>,
    pub text: String,
    pub attempts: u32,
    pub state: OutboxState,
    pub receipt: Option<String>,
    pub last_error: Option<String>,
    /// Buttons under the text (interactive channels only).
    pub actions: Vec<Button>,
    /// Shown to this platform user only.
    pub visible_to: Option<String>,
    /// This row replaces the message outbox row `replaces` became.
    pub replaces: Option<i64>,
    /// The file this row sends (its text is the comment).
    pub file: Option<OutboxFile>,
}

/// A button on an outbound message, as stored with its row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Button {
    /// What a click on it reports (`interaction.action`).
    pub id: String,
    pub label: String,
    pub style: ButtonStyle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ButtonStyle {
    Plain,
    Primary,
    Danger,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxState {
    Pending,
    Sent,
    Failed,
}

impl OutboxState {
    fn parse(s: &str) -> Self {
        match s {
            "sent" => Self::Sent,
            "failed" => Self::Failed,
            _ => Self::Pending,
        }
    }
}

/// A reply to put in the outbox: its parts, in order.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub channel: String,
    pub conversation: String,
    pub thread: Option<String>,
    pub reply_to: Option<String>,
    pub parts: Vec<String>,
    /// Under the last part.
    pub actions: Vec<Button>,
    pub visible_to: Option<String>,
    /// The outbox row whose message this one replaces (one part only).
    pub replaces: Option<i64>,
    /// A file sent with the (one) part as its comment.
    pub file: Option<(OutboxFile, Vec<u8>)>,
}

pub struct ChannelStore {
    conn: Mutex<Connection>,
}

const INBOUND_COLUMNS: &str = "id, channel, conversation, thread, message_id, sender, sender_name, text, workspace, state, received_ms, turn_id, status_handle, files";
const OUTBOX_COLUMNS: &str = "id, channel, conversation, thread, reply_to, text, attempts, state, \
                              receipt, last_error, actions, visible_to, replaces, file";

impl ChannelStore {
    pub fn open(db: &Path) -> Result<Self, StoreError> {
        let conn = crate::db::open(db)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS channel_inbound (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                channel TEXT NOT NULL,
                conversation TEXT NOT NULL,
                thread TEXT,
                message_id TEXT NOT NULL,
                sender TEXT NOT NULL,
                sender_name TEXT,
                text TEXT NOT NULL,
                workspace TEXT NOT NULL,
                state TEXT NOT NULL,
                received_ms INTEGER NOT NULL,
                platform_ms INTEGER NOT NULL,
                turn_id TEXT,
                status_handle TEXT,
                UNIQUE (channel, conversation, message_id)
            );
            CREATE INDEX IF NOT EXISTS channel_inbound_state ON channel_inbound (state, id);
            CREATE TABLE IF NOT EXISTS channel_outbox (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                channel TEXT NOT NULL,
                conversation TEXT NOT NULL,
                thread TEXT,
                reply_to TEXT,
                text TEXT NOT NULL,
                inbound_id INTEGER,
                state TEXT NOT NULL DEFAULT 'pending',
                attempts INTEGER NOT NULL DEFAULT 0,
                next_attempt_ms INTEGER NOT NULL,
                claimed_by TEXT,
                claimed_until_ms INTEGER,
                last_error TEXT,
                receipt TEXT,
                created_ms INTEGER NOT NULL,
                sent_ms INTEGER
            );
            CREATE INDEX IF NOT EXISTS channel_outbox_pending
                ON channel_outbox (state, channel, conversation, id);
            CREATE TABLE IF NOT EXISTS channel_outbox_files (
                outbox_id INTEGER PRIMARY KEY,
                bytes BLOB NOT NULL
            );
            CREATE TABLE IF NOT EXISTS channel_clicks (
                channel TEXT NOT NULL,
                click_id TEXT NOT NULL,
                received_ms INTEGER NOT NULL,
                PRIMARY KEY (channel, click_id)
            );",
        )?;
        // Outboxes of releases before interactive messages lack these.
        crate::db::add_missing_columns(
            &conn,
            "channel_outbox",
            &[
                ("actions", "TEXT"),
                ("visible_to", "TEXT"),
                ("replaces", "INTEGER"),
                ("file", "TEXT"),
            ],
        )?;
        crate::db::add_missing_columns(&conn, "channel_inbound", &[("files", "TEXT")])?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        self.conn.lock().map_err(|_| StoreError::Poisoned)
    }

    /// Stores an inbound message. `None` when it is already stored (a
    /// platform redelivery). A refused or dropped message's text is not
    /// stored: its size and SHA-256 are ([`refused_text`]), so a sender not
    /// allowed, or over its rate limit, cannot fill the database with text.
    pub fn receive(
        &self,
        message: &Received,
        workspace: &str,
        state: InboundState,
    ) -> Result<Option<i64>, StoreError> {
        let refused;
        let text = if matches!(state, InboundState::Refused | InboundState::Dropped) {
            refused = refused_text(&message.text, state);
            refused.as_str()
        } else {
            message.text.as_str()
        };
        // A refused or dropped message's files are not kept either.
        let kept = !matches!(state, InboundState::Refused | InboundState::Dropped);
        let files = (kept && !message.files.is_empty())
            .then(|| serde_json::to_string(&message.files))
            .transpose()
            .map_err(|e| StoreError::Db(rusqlite::Error::ToSqlConversionFailure(Box::new(e))))?;
        let conn = self.conn()?;
        let inserted = conn.execute(
            "INSERT INTO channel_inbound
                (channel, conversation, thread, message_id, sender, sender_name, text,
                 workspace, state, received_ms, platform_ms, files)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
             ON CONFLICT (channel, conversation, message_id) DO NOTHING",
            params![
                message.channel,
                message.conversation,
                message.thread,
                message.message_id,
                message.sender,
                message.sender_name,
                text,
                workspace,
                state.as_str(),
                now_ms(),
                i64::try_from(message.timestamp_ms).unwrap_or(i64::MAX),
                files,
            ],
        )?;
        Ok((inserted == 1).then(|| conn.last_insert_rowid()))
    }

    pub fn inbound(&self, id: i64) -> Result<Option<InboundRow>, StoreError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                &format!("SELECT {INBOUND_COLUMNS} FROM channel_inbound WHERE id = ?1"),
                [id],
                inbound_row,
            )
            .optional()?)
    }

    /// The platform ids of `conversation`'s messages that ran a turn (so
    /// the session holds them already).
    pub fn turned(
        &self,
        channel: &str,
        conversation: &str,
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT message_id FROM channel_inbound
             WHERE channel = ?1 AND conversation = ?2
               AND state IN ('running', 'done', 'failed', 'interrupted')",
        )?;
        let ids = stmt.query_map(params![channel, conversation], |r| r.get(0))?;
        Ok(ids.collect::<Result<_, _>>()?)
    }

    /// Messages in `state`, oldest first.
    pub fn inbound_in(&self, state: InboundState) -> Result<Vec<InboundRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {INBOUND_COLUMNS} FROM channel_inbound WHERE state = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([state.as_str()], inbound_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Moves message `id` from queued to running; `false` when it was not
    /// queued (another worker or a stop got there first).
    pub fn start(&self, id: i64) -> Result<bool, StoreError> {
        let changed = self.conn()?.execute(
            "UPDATE channel_inbound SET state = ?2 WHERE id = ?1 AND state = ?3",
            params![
                id,
                InboundState::Running.as_str(),
                InboundState::Queued.as_str()
            ],
        )?;
        Ok(changed == 1)
    }

    pub fn set_turn(&self, id: i64, turn_id: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE channel_inbound SET turn_id = ?2 WHERE id = ?1",
            params![id, turn_id],
        )?;
        Ok(())
    }

    pub fn set_status_handle(&self, id: i64, handle: Option<&str>) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE channel_inbound SET status_handle = ?2 WHERE id = ?1",
            params![id, handle],
        )?;
        Ok(())
    }

    /// Ends an inbound message's turn and queues its reply, in one
    /// transaction: a reply is never lost between the two.
    pub fn finish(
        &self,
        inbound_id: Option<i64>,
        state: InboundState,
        reply: &Reply,
    ) -> Result<Vec<i64>, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let now = now_ms();
        let mut ids = Vec::with_capacity(reply.parts.len());
        let actions = (!reply.actions.is_empty())
            .then(|| serde_json::to_string(&reply.actions))
            .transpose()
            .map_err(|e| StoreError::Db(rusqlite::Error::ToSqlConversionFailure(Box::new(e))))?;
        let file = reply
            .file
            .as_ref()
            .map(|(file, _)| serde_json::to_string(file))
            .transpose()
            .map_err(|e| StoreError::Db(rusqlite::Error::ToSqlConversionFailure(Box::new(e))))?;
        let last = reply.parts.len().saturating_sub(1);
        for (i, part) in reply.parts.iter().enumerate() {
            tx.execute(
                "INSERT INTO channel_outbox
                    (channel, conversation, thread, reply_to, text, inbound_id,
                     next_attempt_ms, created_ms, actions, visible_to, replaces, file)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, ?11)",
                params![
                    reply.channel,
                    reply.conversation,
                    reply.thread,
                    reply.reply_to,
                    part,
                    inbound_id,
                    now,
                    if i == last { actions.as_deref() } else { None },
                    reply.visible_to,
                    reply.replaces,
                    if i == last { file.as_deref() } else { None },
                ],
            )?;
            let id = tx.last_insert_rowid();
            if i == last
                && let Some((_, bytes)) = &reply.file
            {
                tx.execute(
                    "INSERT INTO channel_outbox_files (outbox_id, bytes) VALUES (?1, ?2)",
                    params![id, bytes],
                )?;
            }
            ids.push(id);
        }
        if let Some(id) = inbound_id {
            tx.execute(
                "UPDATE channel_inbound SET state = ?2 WHERE id = ?1",
                params![id, state.as_str()],
            )?;
        }
        tx.commit()?;
        Ok(ids)
    }

    /// Claims up to `limit` due outbox rows for `owner` until `lease_ms`
    /// from now: for each conversation only its oldest undelivered row, so
    /// the parts of a reply and successive replies arrive in order.
    pub fn claim_due(
        &self,
        owner: &str,
        lease_ms: i64,
        limit: usize,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let now = now_ms();
        let ids: Vec<i64> = {
            let mut stmt = tx.prepare(
                "SELECT o.id FROM channel_outbox o
                 WHERE o.state = 'pending'
                   AND o.id = (SELECT MIN(id) FROM channel_outbox p
                               WHERE p.state = 'pending' AND p.channel = o.channel
                                 AND p.conversation = o.conversation)
                   AND o.next_attempt_ms <= ?1
                   AND (o.claimed_until_ms IS NULL OR o.claimed_until_ms <= ?1)
                 ORDER BY o.next_attempt_ms, o.id
                 LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![now, limit as i64], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            tx.execute(
                "UPDATE channel_outbox SET claimed_by = ?2, claimed_until_ms = ?3 WHERE id = ?1",
                params![id, owner, now + lease_ms],
            )?;
            claimed.push(tx.query_row(
                &format!("SELECT {OUTBOX_COLUMNS} FROM channel_outbox WHERE id = ?1"),
                [id],
                outbox_row,
            )?);
        }
        tx.commit()?;
        Ok(claimed)
    }

    /// Releases the claims other owners hold on undelivered rows (a daemon
    /// killed mid-delivery); returns how many. Pincer runs one daemon per
    /// database today, so every other owner is gone.
    pub fn release_foreign_claims(&self, owner: &str) -> Result<usize, StoreError> {
        Ok(self.conn()?.execute(
            "UPDATE channel_outbox SET claimed_by = NULL, claimed_until_ms = NULL
             WHERE state = 'pending' AND claimed_by IS NOT NULL AND claimed_by != ?1",
            [owner],
        )?)
    }

    /// When the next pending row is due (ms since the epoch), if any.
    pub fn next_due_ms(&self) -> Result<Option<i64>, StoreError> {
        let conn = self.conn()?;
        Ok(conn.query_row(
            "SELECT MIN(MAX(next_attempt_ms, COALESCE(claimed_until_ms, 0)))
             FROM channel_outbox WHERE state = 'pending'",
            [],
            |r| r.get(0),
        )?)
    }

    pub fn delivered(&self, id: i64, receipt: &str) -> Result<(), StoreError> {
        let conn = self.conn()?;
        conn.execute(
            "UPDATE channel_outbox SET state = 'sent', receipt = ?2, sent_ms = ?3,
                attempts = attempts + 1, claimed_by = NULL, claimed_until_ms = NULL
             WHERE id = ?1",
            params![id, receipt, now_ms()],
        )?;
        conn.execute(
            "DELETE FROM channel_outbox_files WHERE outbox_id = ?1",
            [id],
        )?;
        Ok(())
    }

    /// The bytes of the file outbox row `id` sends, while it is undelivered.
    pub fn outbox_file_bytes(&self, id: i64) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self
            .conn()?
            .query_row(
                "SELECT bytes FROM channel_outbox_files WHERE outbox_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Puts a row back for another attempt at `retry_at_ms`.
    pub fn retry_at(&self, id: i64, retry_at_ms: i64, error: &str) -> Result<(), StoreError> {
        self.conn()?.execute(
            "UPDATE channel_outbox SET attempts = attempts + 1, next_attempt_ms = ?2,
                last_error = ?3, claimed_by = NULL, claimed_until_ms = NULL
             WHERE id = ?1",
            params![id, retry_at_ms, error],
        )?;
        Ok(())
    }

    pub fn give_up(&self, id: i64, error: &str) -> Result<(), StoreError> {
        let conn = self.conn()?;
        conn.execute(
            "UPDATE channel_outbox SET state = 'failed', attempts = attempts + 1,
                last_error = ?2, claimed_by = NULL, claimed_until_ms = NULL
             WHERE id = ?1",
            params![id, error],
        )?;
        conn.execute(
            "DELETE FROM channel_outbox_files WHERE outbox_id = ?1",
            [id],
        )?;
        Ok(())
    }

    /// The latest replies of `channel` given up on, newest first.
    pub fn failed(&self, channel: &str, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM channel_outbox WHERE channel = ?1 AND state = 'failed'
             ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![channel, limit], outbox_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Puts a reply given up on back in the queue, due now. A file's bytes
    /// were dropped when it failed, so a file cannot be retried. `false`
    /// when the row is not a failed text reply.
    pub fn retry_failed(&self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        Ok(self.conn()?.execute(
            "UPDATE channel_outbox SET state = 'pending', next_attempt_ms = ?2,
                claimed_by = NULL, claimed_until_ms = NULL
             WHERE id = ?1 AND state = 'failed' AND file IS NULL",
            params![id, now_ms],
        )? == 1)
    }

    /// Every outbox row of a channel, oldest first.
    pub fn outbox(&self, channel: &str) -> Result<Vec<OutboxRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM channel_outbox WHERE channel = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([channel], outbox_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The outbox rows with these ids (e.g. a scheduled run's output),
    /// in id order; ids with no row are left out.
    pub fn outbox_rows(&self, ids: &[i64]) -> Result<Vec<OutboxRow>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {OUTBOX_COLUMNS} FROM channel_outbox WHERE id = ?1"
        ))?;
        let mut out = Vec::with_capacity(ids.len());
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        for id in ids {
            if let Some(row) = stmt.query_row([id], outbox_row).optional()? {
                out.push(row);
            }
        }
        Ok(out)
    }

    /// The sent row of `channel` in `conversation` whose platform id is
    /// `receipt` and that carried a button `action`: a click counts only
    /// on a message pincer sent with that very button.
    pub fn sent_with_action(
        &self,
        channel: &str,
        conversation: &str,
        receipt: &str,
        action: &str,
    ) -> Result<Option<OutboxRow>, StoreError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                &format!(
                    "SELECT {OUTBOX_COLUMNS} FROM channel_outbox o
                     WHERE channel = ?1 AND conversation = ?2 AND receipt = ?3
                       AND actions IS NOT NULL AND replaces IS NULL
                       AND EXISTS (SELECT 1 FROM json_each(o.actions)
                                   WHERE json_extract(value, '$.id') = ?4)
                     ORDER BY id DESC LIMIT 1"
                ),
                params![channel, conversation, receipt, action],
                outbox_row,
            )
            .optional()?)
    }

    /// The newest row of `channel` with a button whose id starts with
    /// `prefix` (the message asking for a decision, to replace once it is
    /// decided).
    pub fn with_action_prefix(
        &self,
        channel: &str,
        prefix: &str,
    ) -> Result<Option<OutboxRow>, StoreError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                &format!(
                    "SELECT {OUTBOX_COLUMNS} FROM channel_outbox o
                     WHERE channel = ?1 AND actions IS NOT NULL AND replaces IS NULL
                       AND EXISTS (SELECT 1 FROM json_each(o.actions)
                                   WHERE substr(json_extract(value, '$.id'), 1, length(?2)) = ?2)
                     ORDER BY id DESC LIMIT 1"
                ),
                params![channel, prefix],
                outbox_row,
            )
            .optional()?)
    }

    /// Records click `click_id` of `channel`: `false` when it was recorded
    /// already (the platform delivered it again).
    pub fn first_click(&self, channel: &str, click_id: &str) -> Result<bool, StoreError> {
        Ok(self.conn()?.execute(
            "INSERT OR IGNORE INTO channel_clicks (channel, click_id, received_ms)
             VALUES (?1, ?2, ?3)",
            params![channel, click_id, now_ms()],
        )? == 1)
    }

    /// Rows waiting to be delivered, per channel.
    pub fn outbox_depth(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT channel, COUNT(*) FROM channel_outbox WHERE state = 'pending'
             GROUP BY channel ORDER BY channel",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// What is stored of a refused (or dropped) message's text: its size and
/// SHA-256.
pub fn refused_text(text: &str, state: InboundState) -> String {
    use sha2::Digest as _;
    format!(
        "({}, not stored: {} bytes, sha256 {})",
        state.as_str(),
        text.len(),
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    )
}

/// Rows [`ChannelStore::prune`] removed (or would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    pub inbound: usize,
    /// Older than the retention but kept: not yet answered (queued or
    /// running, or its reply not yet delivered or given up).
    pub inbound_kept: usize,
    pub outbox: usize,
    /// Older than the retention but kept: not yet delivered or given up.
    pub outbox_kept: usize,
}

const PRUNABLE_INBOUND: &str = "received_ms < ?1
    AND state IN ('done', 'failed', 'refused', 'dropped', 'interrupted')
    AND NOT EXISTS (SELECT 1 FROM channel_outbox o
                    WHERE o.inbound_id = channel_inbound.id AND o.state = 'pending')";
const PRUNABLE_OUTBOX: &str = "COALESCE(sent_ms, created_ms) < ?1 AND state IN ('sent', 'failed')";

impl ChannelStore {
    /// Deletes inbound messages received before `inbound_before_ms` and
    /// outbox rows sent (or given up) before `outbox_before_ms`; never a
    /// message not yet answered nor a row not yet delivered or given up.
    /// With `dry_run` only counts.
    pub fn prune(
        &self,
        inbound_before_ms: i64,
        outbox_before_ms: i64,
        dry_run: bool,
    ) -> Result<Pruned, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        let count = |sql: &str, before: i64| -> rusqlite::Result<usize> {
            let n: i64 = tx.query_row(sql, [before], |r| r.get(0))?;
            Ok(usize::try_from(n).unwrap_or(0))
        };
        let old_inbound = count(
            "SELECT COUNT(*) FROM channel_inbound WHERE received_ms < ?1",
            inbound_before_ms,
        )?;
        let old_outbox = count(
            "SELECT COUNT(*) FROM channel_outbox WHERE COALESCE(sent_ms, created_ms) < ?1",
            outbox_before_ms,
        )?;
        let pruned = if dry_run {
            let inbound = count(
                &format!("SELECT COUNT(*) FROM channel_inbound WHERE {PRUNABLE_INBOUND}"),
                inbound_before_ms,
            )?;
            let outbox = count(
                &format!("SELECT COUNT(*) FROM channel_outbox WHERE {PRUNABLE_OUTBOX}"),
                outbox_before_ms,
            )?;
            (inbound, outbox)
        } else {
            // inbound first: its "reply still pending" test reads the outbox
            let inbound = tx.execute(
                &format!("DELETE FROM channel_inbound WHERE {PRUNABLE_INBOUND}"),
                [inbound_before_ms],
            )?;
            let outbox = tx.execute(
                &format!("DELETE FROM channel_outbox WHERE {PRUNABLE_OUTBOX}"),
                [outbox_before_ms],
            )?;
            // A click redelivered after this long finds its request decided.
            tx.execute(
                "DELETE FROM channel_clicks WHERE received_ms < ?1",
                [outbox_before_ms],
            )?;
            (inbound, outbox)
        };
        tx.commit()?;
        Ok(Pruned {
            inbound: pruned.0,
            inbound_kept: old_inbound - pruned.0,
            outbox: pruned.1,
            outbox_kept: old_outbox - pruned.1,
        })
    }
}

fn inbound_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InboundRow> {
    Ok(InboundRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        conversation: r.get(2)?,
        thread: r.get(3)?,
        message_id: r.get(4)?,
        sender: r.get(5)?,
        sender_name: r.get(6)?,
        text: r.get(7)?,
        workspace: r.get(8)?,
        state: InboundState::parse(&r.get::<_, String>(9)?),
        received_ms: r.get(10)?,
        turn_id: r.get(11)?,
        status_handle: r.get(12)?,
        // Written by this store; a list it cannot read back is no files.
        files: r
            .get::<_, Option<String>>(13)?
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
    })
}

fn outbox_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OutboxRow> {
    Ok(OutboxRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        conversation: r.get(2)?,
        thread: r.get(3)?,
        reply_to: r.get(4)?,
        text: r.get(5)?,
        attempts: r.get(6)?,
        state: OutboxState::parse(&r.get::<_, String>(7)?),
        receipt: r.get(8)?,
        last_error: r.get(9)?,
        // Written by this store from `Button`s; a row it cannot read back
        // shows no buttons.
        actions: r
            .get::<_, Option<String>>(10)?
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
        visible_to: r.get(11)?,
        replaces: r.get(12)?,
        file: r
            .get::<_, Option<String>>(13)?
            .and_then(|text| serde_json::from_str(&text).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(id: &str) -> Received {
        Received {
            channel: "slack".into(),
            conversation: "D1".into(),
            thread: None,
            message_id: id.into(),
            sender: "U1".into(),
            sender_name: None,
            text: "hi".into(),
            timestamp_ms: 1,
            files: Vec::new(),
        }
    }

    fn reply(parts: &[&str]) -> Reply {
        Reply {
            channel: "slack".into(),
            conversation: "D1".into(),
            thread: None,
            reply_to: None,
            parts: parts.iter().map(|s| s.to_string()).collect(),
            ..Reply::default()
        }
    }

    #[test]
    fn a_redelivered_message_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = ChannelStore::open(&dir.path().join("p.db")).unwrap();
        let first = store
            .receive(&received("1.1"), "default", InboundState::Queued)
            .unwrap();
        assert!(first.is_some());
        assert_eq!(
            store
                .receive(&received("1.1"), "default", InboundState::Queued)
                .unwrap(),
            None
        );
        assert_eq!(store.inbound_in(InboundState::Queued).unwrap().len(), 1);
    }

    #[test]
    fn parts_are_claimed_one_at_a_time_per_conversation_and_leases_expire() {
        let dir = tempfile::tempdir().unwrap();
        let store = ChannelStore::open(&dir.path().join("p.db")).unwrap();
        store
            .finish(None, InboundState::Done, &reply(&["one", "two"]))
            .unwrap();
        let claimed = store.claim_due("a", 60_000, 10).unwrap();
        assert_eq!(
            claimed.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
            ["one"]
        );
        assert!(
            store.claim_due("b", 60_000, 10).unwrap().is_empty(),
            "claimed"
        );
        store.delivered(claimed[0].id, "ts1").unwrap();
        let next = store.claim_due("a", 0, 10).unwrap();
        assert_eq!(next[0].text, "two");
        // A zero lease has expired already: another worker may take it.
        assert_eq!(store.claim_due("b", 60_000, 10).unwrap()[0].text, "two");
        // A daemon that died holding a claim: the next one frees it.
        assert!(store.claim_due("c", 60_000, 10).unwrap().is_empty());
        assert_eq!(store.release_foreign_claims("c").unwrap(), 1);
        assert_eq!(store.claim_due("c", 60_000, 10).unwrap()[0].text, "two");
    }
}
