//! What channels keep in `pincer.db`: every inbound message (stored before
//! anything else happens to it, de-duplicated by its platform id) and the
//! outbox (a reply is a row before it is sent; its platform receipt is
//! stored when it is).
//!
//! Rows that a worker works on are claimed (owner and deadline), so a
//! daemon that dies mid-delivery leaves a claim that expires, never a row
//! that nobody will pick up again.

use std::path::Path;

use serde::Serialize;

use super::rates::{self, Counter, Rate};
use crate::args;
use crate::db::{Db, DbError, Dialect, Location, Row, Value, now_ms};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("channel store: {0}")]
    Db(#[from] DbError),
    /// The turn's workspace is run by another daemon now.
    #[error("channel store: {0}")]
    Fenced(#[from] crate::cluster::LeaseError),
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
    db: Db,
    /// Checks that this daemon still runs a turn's workspace when the turn
    /// starts or ends ([`ChannelStore::fence_turns_with`]).
    fence: std::sync::OnceLock<std::sync::Arc<dyn crate::cluster::Membership>>,
}

const INBOUND_COLUMNS: &str = "id, channel, conversation, thread, message_id, sender, sender_name, text, workspace, state, received_ms, turn_id, status_handle, files";
const OUTBOX_COLUMNS: &str = "id, channel, conversation, thread, reply_to, text, attempts, state, \
                              receipt, last_error, actions, visible_to, replaces, file";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS channel_inbound (
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
    );";

impl ChannelStore {
    pub fn open(db: &Path) -> Result<Self, StoreError> {
        Self::open_at(&Location::from(db))
    }

    pub fn open_at(location: &Location) -> Result<Self, StoreError> {
        let db = Db::open(location)?;
        db.transaction(|conn| -> Result<(), DbError> {
            conn.schema(SCHEMA)?;
            conn.schema(rates::SCHEMA)?;
            // Outboxes of releases before interactive messages lack these.
            conn.add_missing_columns(
                "channel_outbox",
                &[
                    ("actions", "TEXT"),
                    ("visible_to", "TEXT"),
                    ("replaces", "INTEGER"),
                    ("file", "TEXT"),
                ],
            )?;
            conn.add_missing_columns("channel_inbound", &[("files", "TEXT")])
        })?;
        Ok(Self {
            db,
            fence: std::sync::OnceLock::new(),
        })
    }

    /// From now on, a turn starts ([`ChannelStore::start`]) and ends
    /// ([`ChannelStore::finish`] of a running message) only while
    /// `membership` holds its workspace, checked in the same transaction:
    /// a daemon that lost the workspace to another cannot answer twice.
    pub fn fence_turns_with(&self, membership: std::sync::Arc<dyn crate::cluster::Membership>) {
        let _ = self.fence.set(membership);
    }

    /// Inbound message `id`'s state (`None`: no such message), read once;
    /// checks the fence first when the message is in one of `fenced`.
    fn state_fenced_if(
        &self,
        tx: &mut dyn crate::db::Conn,
        id: i64,
        fenced: &[InboundState],
    ) -> Result<Option<InboundState>, StoreError> {
        let Some(row) = tx.query_opt(
            "SELECT workspace, state FROM channel_inbound WHERE id = ?1",
            args![id],
        )?
        else {
            return Ok(None);
        };
        let state = InboundState::parse(&row.get::<String>(1)?);
        if let Some(fence) = self.fence.get()
            && fenced.contains(&state)
        {
            fence.fence(&row.get::<String>(0)?, tx)?;
        }
        Ok(Some(state))
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
        Ok(self
            .db
            .run(|conn| insert_inbound(conn, message, workspace, state))?)
    }

    /// Stores a message counted against the rate windows, in one
    /// transaction with them, so every daemon on this state counts against
    /// the same windows. An allowed sender's message counts against its
    /// sender's and conversation's windows: queued when [`Rate::Take`],
    /// stored as dropped (no text) when over. A refused one is stored as
    /// refused and counted against its sender's refusal window (a
    /// [`Rate::Drop`] whose `report` says whether to report it). `None`
    /// when it is already stored, counted then.
    pub fn receive_counted(
        &self,
        message: &Received,
        workspace: &str,
        allowed: bool,
    ) -> Result<Option<(i64, Rate)>, StoreError> {
        let now = now_ms();
        let (channel, sender) = (&message.channel, &message.sender);
        Ok(self.db.transaction(|tx| {
            if allowed {
                let counters = Counter::message(channel, sender, &message.conversation);
                insert_counted(tx, message, workspace, &counters, now, |rate| match rate {
                    Rate::Take => InboundState::Queued,
                    Rate::Drop { .. } => InboundState::Dropped,
                })
            } else {
                let counters = Counter::refusal(channel, sender);
                insert_counted(tx, message, workspace, &counters, now, |_| {
                    InboundState::Refused
                })
            }
        })?)
    }

    pub fn inbound(&self, id: i64) -> Result<Option<InboundRow>, StoreError> {
        self.db.run(|conn| {
            conn.query_opt(
                &format!("SELECT {INBOUND_COLUMNS} FROM channel_inbound WHERE id = ?1"),
                args![id],
            )?
            .as_ref()
            .map(inbound_row)
            .transpose()
        })
    }

    /// The platform ids of `conversation`'s messages that ran a turn (so
    /// the session holds them already).
    pub fn turned(
        &self,
        channel: &str,
        conversation: &str,
    ) -> Result<std::collections::HashSet<String>, StoreError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT message_id FROM channel_inbound
                 WHERE channel = ?1 AND conversation = ?2
                   AND state IN ('running', 'done', 'failed', 'interrupted')",
                args![channel, conversation],
            )?
            .iter()
            .map(|r| Ok(r.get(0)?))
            .collect()
        })
    }

    /// Messages in `state`, oldest first.
    pub fn inbound_in(&self, state: InboundState) -> Result<Vec<InboundRow>, StoreError> {
        self.db.run(|conn| {
            conn.query(
                &format!(
                    "SELECT {INBOUND_COLUMNS} FROM channel_inbound WHERE state = ?1 ORDER BY id"
                ),
                args![state.as_str()],
            )?
            .iter()
            .map(inbound_row)
            .collect()
        })
    }

    /// Workspace `workspace`'s messages in `state`, oldest first.
    pub fn inbound_of(
        &self,
        workspace: &str,
        state: InboundState,
    ) -> Result<Vec<InboundRow>, StoreError> {
        self.db.run(|conn| {
            conn.query(
                &format!(
                    "SELECT {INBOUND_COLUMNS} FROM channel_inbound
                     WHERE state = ?1 AND workspace = ?2 ORDER BY id"
                ),
                args![state.as_str(), workspace],
            )?
            .iter()
            .map(inbound_row)
            .collect()
        })
    }

    /// Moves message `id` from queued to running; `false` when it was not
    /// queued (another worker or a stop got there first).
    pub fn start(&self, id: i64) -> Result<bool, StoreError> {
        self.db.transaction(|tx| {
            self.state_fenced_if(tx, id, &[InboundState::Queued])?;
            Ok(tx.execute(
                "UPDATE channel_inbound SET state = ?2 WHERE id = ?1 AND state = ?3",
                args![
                    id,
                    InboundState::Running.as_str(),
                    InboundState::Queued.as_str()
                ],
            )? == 1)
        })
    }

    pub fn set_turn(&self, id: i64, turn_id: &str) -> Result<(), StoreError> {
        self.execute(
            "UPDATE channel_inbound SET turn_id = ?2 WHERE id = ?1",
            args![id, turn_id],
        )
        .map(drop)
    }

    pub fn set_status_handle(&self, id: i64, handle: Option<&str>) -> Result<(), StoreError> {
        self.execute(
            "UPDATE channel_inbound SET status_handle = ?2 WHERE id = ?1",
            args![id, handle],
        )
        .map(drop)
    }

    fn execute(&self, sql: &str, args: &[Value]) -> Result<usize, StoreError> {
        self.db.run(|conn| Ok(conn.execute(sql, args)?))
    }

    /// Ends an inbound message's turn and queues its reply, in one
    /// transaction: a reply is never lost between the two.
    pub fn finish(
        &self,
        inbound_id: Option<i64>,
        state: InboundState,
        reply: &Reply,
    ) -> Result<Vec<i64>, StoreError> {
        let actions = (!reply.actions.is_empty())
            .then(|| serde_json::to_string(&reply.actions))
            .transpose()
            .map_err(DbError::from)?;
        let file = reply
            .file
            .as_ref()
            .map(|(file, _)| serde_json::to_string(file))
            .transpose()
            .map_err(DbError::from)?;
        let last = reply.parts.len().saturating_sub(1);
        self.db.transaction(|tx| {
            if let Some(id) = inbound_id {
                // A turn's end (its message running, or ended meanwhile by
                // the daemon that took the workspace over) is fenced; a
                // notice to a message just stored is not.
                let ended = [
                    InboundState::Done,
                    InboundState::Failed,
                    InboundState::Interrupted,
                ];
                let state = self.state_fenced_if(
                    tx,
                    id,
                    &[InboundState::Running, ended[0], ended[1], ended[2]],
                )?;
                // A message ends once: a turn that ends after its message
                // was recorded interrupted (its workspace went to another
                // daemon and came back) queues nothing.
                if let Some(state) = state.filter(|s| ended.contains(s)) {
                    tracing::warn!(id, ?state, "a message that has ended is not answered again");
                    return Ok(Vec::new());
                }
            }
            let now = now_ms();
            let mut ids = Vec::with_capacity(reply.parts.len());
            for (i, part) in reply.parts.iter().enumerate() {
                let id: i64 = tx
                    .query_one(
                        "INSERT INTO channel_outbox
                            (channel, conversation, thread, reply_to, text, inbound_id,
                             next_attempt_ms, created_ms, actions, visible_to, replaces, file)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, ?11)
                         RETURNING id",
                        args![
                            &reply.channel,
                            &reply.conversation,
                            &reply.thread,
                            &reply.reply_to,
                            part,
                            inbound_id,
                            now,
                            if i == last { actions.as_deref() } else { None },
                            &reply.visible_to,
                            reply.replaces,
                            if i == last { file.as_deref() } else { None },
                        ],
                    )?
                    .get(0)?;
                if i == last
                    && let Some((_, bytes)) = &reply.file
                {
                    tx.execute(
                        "INSERT INTO channel_outbox_files (outbox_id, bytes) VALUES (?1, ?2)",
                        args![id, bytes.as_slice()],
                    )?;
                }
                ids.push(id);
            }
            if let Some(id) = inbound_id {
                tx.execute(
                    "UPDATE channel_inbound SET state = ?2 WHERE id = ?1",
                    args![id, state.as_str()],
                )?;
            }
            Ok(ids)
        })
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
        self.db.transaction(|tx| {
            let now = now_ms();
            let ids = tx.query(
                "SELECT o.id FROM channel_outbox o
                 WHERE o.state = 'pending'
                   AND o.id = (SELECT MIN(id) FROM channel_outbox p
                               WHERE p.state = 'pending' AND p.channel = o.channel
                                 AND p.conversation = o.conversation)
                   AND o.next_attempt_ms <= ?1
                   AND (o.claimed_until_ms IS NULL OR o.claimed_until_ms <= ?1)
                 ORDER BY o.next_attempt_ms, o.id
                 LIMIT ?2",
                args![now, limit],
            )?;
            let mut claimed = Vec::with_capacity(ids.len());
            for id in ids {
                let id: i64 = id.get(0)?;
                tx.execute(
                    "UPDATE channel_outbox SET claimed_by = ?2, claimed_until_ms = ?3 WHERE id = ?1",
                    args![id, owner, now + lease_ms],
                )?;
                claimed.push(outbox_row(&tx.query_one(
                    &format!("SELECT {OUTBOX_COLUMNS} FROM channel_outbox WHERE id = ?1"),
                    args![id],
                )?)?);
            }
            Ok(claimed)
        })
    }

    /// Releases the claims on undelivered rows of owners not among the
    /// daemons `alive` (a daemon killed mid-delivery); returns how many.
    pub fn release_claims_of_the_gone(&self, alive: &[String]) -> Result<usize, StoreError> {
        self.db.transaction(|tx| {
            let owners = tx.query(
                "SELECT DISTINCT claimed_by FROM channel_outbox
                 WHERE state = 'pending' AND claimed_by IS NOT NULL",
                args![],
            )?;
            let mut released = 0;
            for owner in owners {
                let owner: String = owner.get(0)?;
                if !alive.contains(&owner) {
                    released += tx.execute(
                        "UPDATE channel_outbox SET claimed_by = NULL, claimed_until_ms = NULL
                         WHERE state = 'pending' AND claimed_by = ?1",
                        args![owner],
                    )?;
                }
            }
            Ok(released)
        })
    }

    /// When the next pending row is due (ms since the epoch), if any.
    pub fn next_due_ms(&self) -> Result<Option<i64>, StoreError> {
        self.db.run(|conn| {
            Ok(conn
                .query_one(
                    "SELECT MIN(CASE WHEN claimed_until_ms > next_attempt_ms
                                     THEN claimed_until_ms ELSE next_attempt_ms END)
                     FROM channel_outbox WHERE state = 'pending'",
                    args![],
                )?
                .get(0)?)
        })
    }

    pub fn delivered(&self, id: i64, receipt: &str) -> Result<(), StoreError> {
        self.db.transaction(|tx| {
            tx.execute(
                "UPDATE channel_outbox SET state = 'sent', receipt = ?2, sent_ms = ?3,
                    attempts = attempts + 1, claimed_by = NULL, claimed_until_ms = NULL
                 WHERE id = ?1",
                args![id, receipt, now_ms()],
            )?;
            tx.execute(
                "DELETE FROM channel_outbox_files WHERE outbox_id = ?1",
                args![id],
            )?;
            Ok(())
        })
    }

    /// The bytes of the file outbox row `id` sends, while it is undelivered.
    pub fn outbox_file_bytes(&self, id: i64) -> Result<Option<Vec<u8>>, StoreError> {
        self.db.run(|conn| {
            Ok(conn
                .query_opt(
                    "SELECT bytes FROM channel_outbox_files WHERE outbox_id = ?1",
                    args![id],
                )?
                .map(|r| r.get(0))
                .transpose()?)
        })
    }

    /// Puts a row back for another attempt at `retry_at_ms`.
    pub fn retry_at(&self, id: i64, retry_at_ms: i64, error: &str) -> Result<(), StoreError> {
        self.execute(
            "UPDATE channel_outbox SET attempts = attempts + 1, next_attempt_ms = ?2,
                last_error = ?3, claimed_by = NULL, claimed_until_ms = NULL
             WHERE id = ?1",
            args![id, retry_at_ms, error],
        )
        .map(drop)
    }

    pub fn give_up(&self, id: i64, error: &str) -> Result<(), StoreError> {
        self.db.transaction(|tx| {
            tx.execute(
                "UPDATE channel_outbox SET state = 'failed', attempts = attempts + 1,
                    last_error = ?2, claimed_by = NULL, claimed_until_ms = NULL
                 WHERE id = ?1",
                args![id, error],
            )?;
            tx.execute(
                "DELETE FROM channel_outbox_files WHERE outbox_id = ?1",
                args![id],
            )?;
            Ok(())
        })
    }

    fn outbox_where(&self, filter: &str, args: &[Value]) -> Result<Vec<OutboxRow>, StoreError> {
        self.db.run(|conn| {
            conn.query(
                &format!("SELECT {OUTBOX_COLUMNS} FROM channel_outbox o WHERE {filter}"),
                args,
            )?
            .iter()
            .map(outbox_row)
            .collect()
        })
    }

    /// The latest replies of `channel` given up on, newest first.
    pub fn failed(&self, channel: &str, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        self.outbox_where(
            "channel = ?1 AND state = 'failed' ORDER BY id DESC LIMIT ?2",
            args![channel, limit],
        )
    }

    /// Puts a reply given up on back in the queue, due now. A file's bytes
    /// were dropped when it failed, so a file cannot be retried. `false`
    /// when the row is not a failed text reply.
    pub fn retry_failed(&self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.execute(
            "UPDATE channel_outbox SET state = 'pending', next_attempt_ms = ?2,
                claimed_by = NULL, claimed_until_ms = NULL
             WHERE id = ?1 AND state = 'failed' AND file IS NULL",
            args![id, now_ms],
        )
        .map(|changed| changed == 1)
    }

    /// Every outbox row of a channel, oldest first.
    pub fn outbox(&self, channel: &str) -> Result<Vec<OutboxRow>, StoreError> {
        self.outbox_where("channel = ?1 ORDER BY id", args![channel])
    }

    /// The outbox rows with these ids (e.g. a scheduled run's output),
    /// in id order; ids with no row are left out.
    pub fn outbox_rows(&self, ids: &[i64]) -> Result<Vec<OutboxRow>, StoreError> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        self.db.run(|conn| {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(row) = conn.query_opt(
                    &format!("SELECT {OUTBOX_COLUMNS} FROM channel_outbox WHERE id = ?1"),
                    args![id],
                )? {
                    out.push(outbox_row(&row)?);
                }
            }
            Ok(out)
        })
    }

    /// `o`'s buttons (a JSON list) hold one whose id satisfies `test`, where
    /// `test` names the id as `button_id`.
    fn has_button(&self, test: &str) -> String {
        match self.db.dialect() {
            Dialect::Sqlite => format!(
                "EXISTS (SELECT 1 FROM (SELECT json_extract(value, '$.id') AS button_id
                                        FROM json_each(o.actions)) WHERE {test})"
            ),
            Dialect::Postgres => format!(
                "EXISTS (SELECT 1 FROM (SELECT b->>'id' AS button_id
                                        FROM jsonb_array_elements(o.actions::jsonb) b) ids
                         WHERE {test})"
            ),
        }
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
        let filter = format!(
            "channel = ?1 AND conversation = ?2 AND receipt = ?3
             AND actions IS NOT NULL AND replaces IS NULL AND {}
             ORDER BY id DESC LIMIT 1",
            self.has_button("button_id = ?4")
        );
        Ok(self
            .outbox_where(&filter, args![channel, conversation, receipt, action])?
            .pop())
    }

    /// The newest row of `channel` with a button whose id starts with
    /// `prefix` (the message asking for a decision, to replace once it is
    /// decided).
    pub fn with_action_prefix(
        &self,
        channel: &str,
        prefix: &str,
    ) -> Result<Option<OutboxRow>, StoreError> {
        let filter = format!(
            "channel = ?1 AND actions IS NOT NULL AND replaces IS NULL AND {}
             ORDER BY id DESC LIMIT 1",
            self.has_button("substr(button_id, 1, length(CAST(?2 AS TEXT))) = ?2")
        );
        Ok(self.outbox_where(&filter, args![channel, prefix])?.pop())
    }

    /// Records a button click counted against its clicker's and
    /// conversation's rate windows (as a message is: pressing buttons cannot
    /// fill the store or the conversation), in one transaction. `None` when
    /// the click was recorded already (delivered again), counted then.
    pub fn click_counted(
        &self,
        channel: &str,
        click_id: &str,
        user: &str,
        conversation: &str,
    ) -> Result<Option<Rate>, StoreError> {
        let now = now_ms();
        Ok(self.db.transaction(|tx| {
            let first = tx.execute(
                "INSERT INTO channel_clicks (channel, click_id, received_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (channel, click_id) DO NOTHING",
                args![channel, click_id, now],
            )? == 1;
            if !first {
                return Ok::<_, DbError>(None);
            }
            let counters = Counter::message(channel, user, conversation);
            let (rate, windows) = rates::decide(tx, &counters, now)?;
            rates::write(tx, &counters, &windows)?;
            Ok(Some(rate))
        })?)
    }

    /// Rows waiting to be delivered, per channel.
    pub fn outbox_depth(&self) -> Result<Vec<(String, u64)>, StoreError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT channel, COUNT(*) FROM channel_outbox WHERE state = 'pending'
                 GROUP BY channel ORDER BY channel",
                args![],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, r.get(1)?)))
            .collect()
        })
    }
}

/// Inserts an inbound message in the state `state_of` its count against
/// `counters` gives, and writes the count; `None` when it is stored already
/// (a redelivery counts nothing).
fn insert_counted<const N: usize>(
    tx: &mut dyn crate::db::Conn,
    message: &Received,
    workspace: &str,
    counters: &[Counter; N],
    now_ms: i64,
    state_of: impl Fn(Rate) -> InboundState,
) -> Result<Option<(i64, Rate)>, DbError> {
    let (rate, windows) = rates::decide(tx, counters, now_ms)?;
    let Some(id) = insert_inbound(tx, message, workspace, state_of(rate))? else {
        return Ok(None);
    };
    rates::write(tx, counters, &windows)?;
    Ok(Some((id, rate)))
}

/// Inserts an inbound message; `None` when it is stored already.
fn insert_inbound(
    conn: &mut dyn crate::db::Conn,
    message: &Received,
    workspace: &str,
    state: InboundState,
) -> Result<Option<i64>, DbError> {
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
        .transpose()?;
    let inserted = conn.query_opt(
        "INSERT INTO channel_inbound
            (channel, conversation, thread, message_id, sender, sender_name, text,
             workspace, state, received_ms, platform_ms, files)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         ON CONFLICT (channel, conversation, message_id) DO NOTHING
         RETURNING id",
        args![
            &message.channel,
            &message.conversation,
            &message.thread,
            &message.message_id,
            &message.sender,
            &message.sender_name,
            text,
            workspace,
            state.as_str(),
            now_ms(),
            i64::try_from(message.timestamp_ms).unwrap_or(i64::MAX),
            files,
        ],
    )?;
    inserted.map(|row| row.get(0)).transpose()
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
        self.db.transaction(|tx| {
            let mut count = |sql: &str, before: i64| -> Result<usize, DbError> {
                tx.query_one(sql, args![before])?.get(0)
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
                    args![inbound_before_ms],
                )?;
                let outbox = tx.execute(
                    &format!("DELETE FROM channel_outbox WHERE {PRUNABLE_OUTBOX}"),
                    args![outbox_before_ms],
                )?;
                // A click redelivered after this long finds its request decided.
                tx.execute(
                    "DELETE FROM channel_clicks WHERE received_ms < ?1",
                    args![outbox_before_ms],
                )?;
                rates::prune(tx, inbound_before_ms)?;
                (inbound, outbox)
            };
            Ok(Pruned {
                inbound: pruned.0,
                inbound_kept: old_inbound - pruned.0,
                outbox: pruned.1,
                outbox_kept: old_outbox - pruned.1,
            })
        })
    }
}

fn json_list<T: serde::de::DeserializeOwned + Default>(text: Option<String>) -> T {
    // Written by this store; a list it cannot read back is an empty one.
    text.and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

fn inbound_row(r: &Row) -> Result<InboundRow, StoreError> {
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
        state: InboundState::parse(&r.get::<String>(9)?),
        received_ms: r.get(10)?,
        turn_id: r.get(11)?,
        status_handle: r.get(12)?,
        files: json_list(r.get(13)?),
    })
}

fn outbox_row(r: &Row) -> Result<OutboxRow, StoreError> {
    Ok(OutboxRow {
        id: r.get(0)?,
        channel: r.get(1)?,
        conversation: r.get(2)?,
        thread: r.get(3)?,
        reply_to: r.get(4)?,
        text: r.get(5)?,
        attempts: r.get(6)?,
        state: OutboxState::parse(&r.get::<String>(7)?),
        receipt: r.get(8)?,
        last_error: r.get(9)?,
        actions: json_list(r.get(10)?),
        visible_to: r.get(11)?,
        replaces: r.get(12)?,
        file: r
            .get::<Option<String>>(13)?
            .and_then(|text| serde_json::from_str(&text).ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

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

    /// A daemon that holds workspace `ws` or not.
    struct Holds(bool);

    impl crate::cluster::Membership for Holds {
        fn id(&self) -> &str {
            "d"
        }
        fn holds(&self, _: &str) -> bool {
            self.0
        }
        fn alive(&self) -> Vec<String> {
            vec!["d".into()]
        }
        fn fence(
            &self,
            workspace: &str,
            _: &mut dyn crate::db::Conn,
        ) -> Result<(), crate::cluster::LeaseError> {
            if self.0 {
                Ok(())
            } else {
                Err(crate::cluster::LeaseError::NotHeld(workspace.into()))
            }
        }
        fn wake_holder(&self, _: &str) {}
    }

    /// Two daemons on one state, only `holder` holding the workspace: the
    /// other can store and answer a command, but neither start nor end a
    /// turn, and a refused end queues nothing.
    #[test]
    fn only_the_workspace_holder_starts_and_ends_a_turn() {
        each_backend(|at| {
            let holder = ChannelStore::open_at(at).unwrap();
            holder.fence_turns_with(std::sync::Arc::new(Holds(true)));
            let other = ChannelStore::open_at(at).unwrap();
            other.fence_turns_with(std::sync::Arc::new(Holds(false)));

            let id = other
                .receive(&received("1.1"), "ws", InboundState::Queued)
                .unwrap()
                .unwrap();
            let refused = other.start(id).unwrap_err();
            assert!(matches!(refused, StoreError::Fenced(_)), "{refused}");
            assert!(holder.start(id).unwrap());
            let refused = other
                .finish(Some(id), InboundState::Done, &reply(&["stale"]))
                .unwrap_err();
            assert!(refused.to_string().contains("not held"), "{refused}");
            assert!(holder.outbox("slack").unwrap().is_empty(), "nothing queued");
            holder
                .finish(Some(id), InboundState::Done, &reply(&["answer"]))
                .unwrap();
            assert_eq!(holder.outbox("slack").unwrap().len(), 1);
            // Ended: a late second end (a turn cut off, then finishing)
            // queues nothing.
            assert_eq!(
                holder
                    .finish(Some(id), InboundState::Done, &reply(&["late"]))
                    .unwrap(),
                Vec::<i64>::new()
            );
            assert_eq!(holder.outbox("slack").unwrap().len(), 1);

            // A command is answered by whichever daemon received it.
            let command = other
                .receive(&received("1.2"), "ws", InboundState::Queued)
                .unwrap()
                .unwrap();
            other
                .finish(Some(command), InboundState::Done, &reply(&["help"]))
                .unwrap();
            assert_eq!(
                holder.inbound(command).unwrap().unwrap().state,
                InboundState::Done
            );
        });
    }

    #[test]
    fn a_redelivered_message_is_stored_once() {
        each_backend(a_redelivered_message_is_stored_once_on);
    }

    fn a_redelivered_message_is_stored_once_on(at: &Location) {
        let store = ChannelStore::open_at(at).unwrap();
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
        each_backend(parts_are_claimed_one_at_a_time_per_conversation_and_leases_expire_on);
    }

    fn parts_are_claimed_one_at_a_time_per_conversation_and_leases_expire_on(at: &Location) {
        let store = ChannelStore::open_at(at).unwrap();
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
        // A daemon that died holding a claim: the next one frees it; a
        // daemon alive keeps its claims.
        assert!(store.claim_due("c", 60_000, 10).unwrap().is_empty());
        let alive = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            store
                .release_claims_of_the_gone(&alive(&["b", "c"]))
                .unwrap(),
            0
        );
        assert!(store.claim_due("c", 60_000, 10).unwrap().is_empty());
        assert_eq!(store.release_claims_of_the_gone(&alive(&["c"])).unwrap(), 1);
        assert_eq!(store.claim_due("c", 60_000, 10).unwrap()[0].text, "two");
    }

    #[test]
    fn buttons_files_clicks_and_pruning_read_back_the_same() {
        each_backend(|at| {
            let store = ChannelStore::open_at(at).unwrap();
            let mut message = received("9.9");
            message.files = vec![StoredFile {
                id: "F1".into(),
                name: "a.txt".into(),
                media_type: Some("text/plain".into()),
                size: Some(3),
                locator: "https://files/F1".into(),
            }];
            let id = store
                .receive(&message, "default", InboundState::Queued)
                .unwrap()
                .unwrap();
            assert_eq!(store.inbound(id).unwrap().unwrap().files, message.files);
            assert!(store.start(id).unwrap());
            assert!(!store.start(id).unwrap(), "running already");
            assert!(store.turned("slack", "D1").unwrap().contains("9.9"));

            let mut ask = reply(&["approve?"]);
            ask.actions = vec![Button {
                id: "approve:42".into(),
                label: "Approve".into(),
                style: ButtonStyle::Primary,
            }];
            ask.file = Some((
                OutboxFile {
                    name: "r.txt".into(),
                    media_type: "text/plain".into(),
                    size: 2,
                },
                vec![0, 255],
            ));
            let ids = store.finish(Some(id), InboundState::Done, &ask).unwrap();
            assert_eq!(store.outbox_file_bytes(ids[0]).unwrap(), Some(vec![0, 255]));
            assert_eq!(store.outbox_depth().unwrap(), [("slack".to_string(), 1)]);
            assert!(store.next_due_ms().unwrap().is_some());
            let claimed = store.claim_due("me", 60_000, 10).unwrap();
            assert_eq!(claimed[0].actions, ask.actions);
            store.delivered(ids[0], "ts9").unwrap();
            assert_eq!(store.outbox_file_bytes(ids[0]).unwrap(), None);
            assert_eq!(store.next_due_ms().unwrap(), None);

            let asked = store
                .sent_with_action("slack", "D1", "ts9", "approve:42")
                .unwrap()
                .unwrap();
            assert_eq!(asked.id, ids[0]);
            assert!(
                store
                    .sent_with_action("slack", "D1", "ts9", "approve:4")
                    .unwrap()
                    .is_none()
            );
            assert_eq!(
                store
                    .with_action_prefix("slack", "approve:")
                    .unwrap()
                    .unwrap()
                    .id,
                ids[0]
            );
            assert!(
                store
                    .with_action_prefix("slack", "deny:")
                    .unwrap()
                    .is_none()
            );
            assert_eq!(
                store.click_counted("slack", "c1", "U1", "D1").unwrap(),
                Some(Rate::Take)
            );
            assert_eq!(
                store.click_counted("slack", "c1", "U1", "D1").unwrap(),
                None,
                "a click delivered again"
            );

            let pruned = store.prune(i64::MAX, i64::MAX, true).unwrap();
            assert_eq!((pruned.inbound, pruned.outbox), (1, 1));
            let pruned = store.prune(i64::MAX, i64::MAX, false).unwrap();
            assert_eq!((pruned.inbound, pruned.outbox), (1, 1));
            assert!(store.inbound(id).unwrap().is_none());
            assert!(
                store
                    .click_counted("slack", "c1", "U1", "D1")
                    .unwrap()
                    .is_some(),
                "old clicks pruned too"
            );
        });
    }

    /// Two daemons on one PostgreSQL database, each with its own pool, both
    /// handed every event (Slack spreads one event over several sockets,
    /// and retries): each is stored once, and exactly one daemon is told it
    /// is new, so one turn runs.
    #[test]
    fn an_event_delivered_to_two_daemons_makes_one_row_and_one_turn() {
        let at = database();
        let daemons = [
            ChannelStore::open_at(&at).unwrap(),
            ChannelStore::open_at(&at).unwrap(),
        ];
        let new = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for store in &daemons {
                for _ in 0..2 {
                    s.spawn(|| {
                        for i in 0..50 {
                            if store
                                .receive(
                                    &received(&format!("{i}.0")),
                                    "default",
                                    InboundState::Queued,
                                )
                                .unwrap()
                                .is_some()
                            {
                                new.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    });
                }
            }
        });
        assert_eq!(new.into_inner(), 50);
        assert_eq!(
            daemons[1].inbound_in(InboundState::Queued).unwrap().len(),
            50
        );
    }

    /// The rate limits are rows: two daemons receiving one sender's
    /// messages at once let 20 through in all (not 20 each), a message
    /// delivered again is not counted twice, a dropped one is stored
    /// without its text, and a refused sender is reported once in all.
    #[test]
    fn two_daemons_count_a_sender_against_one_window() {
        each_backend(|at| {
            let daemons = [
                ChannelStore::open_at(at).unwrap(),
                ChannelStore::open_at(at).unwrap(),
            ];
            let rates = std::sync::Mutex::new(Vec::new());
            std::thread::scope(|s| {
                for (d, store) in daemons.iter().enumerate() {
                    let (rates, daemons) = (&rates, &daemons);
                    s.spawn(move || {
                        for i in 0..15 {
                            let mut m = received(&format!("{d}.{i}"));
                            m.conversation = format!("D{}", i % 3);
                            let (_, rate) = store.receive_counted(&m, "ws", true).unwrap().unwrap();
                            rates.lock().unwrap().push(rate);
                            // the same event, delivered to the other daemon too
                            assert_eq!(
                                daemons[1 - d].receive_counted(&m, "ws", true).unwrap(),
                                None
                            );
                        }
                    });
                }
            });
            let rates = rates.into_inner().unwrap();
            assert_eq!(rates.iter().filter(|r| **r == Rate::Take).count(), 20);
            let reported: Vec<_> = rates
                .iter()
                .filter(|r| {
                    matches!(
                        r,
                        Rate::Drop {
                            report: Some(_),
                            ..
                        }
                    )
                })
                .collect();
            assert_eq!(
                reported,
                [&Rate::Drop {
                    sender: true,
                    report: Some(0)
                }],
                "told once"
            );
            let dropped = daemons[0].inbound_in(InboundState::Dropped).unwrap();
            assert_eq!(dropped.len(), 10);
            assert!(
                dropped
                    .iter()
                    .all(|m| m.text.starts_with("(dropped, not stored"))
            );
            assert_eq!(
                daemons[0].inbound_in(InboundState::Queued).unwrap().len(),
                20
            );
            // another sender in the same conversations is not held back
            let mut other = received("other");
            other.sender = "U2".into();
            assert_eq!(
                daemons[1]
                    .receive_counted(&other, "ws", true)
                    .unwrap()
                    .map(|(_, r)| r),
                Some(Rate::Take)
            );
            // a refused sender is reported once over both daemons
            let reports: Vec<Rate> = (0..6)
                .map(|i| {
                    let mut m = received(&format!("refused.{i}"));
                    m.sender = "U0STRANGER".into();
                    daemons[i % 2]
                        .receive_counted(&m, "ws", false)
                        .unwrap()
                        .unwrap()
                        .1
                })
                .collect();
            assert_eq!(
                reports
                    .iter()
                    .map(|r| match r {
                        Rate::Drop { report, .. } => *report,
                        Rate::Take => panic!("a refusal is never taken"),
                    })
                    .collect::<Vec<_>>(),
                [Some(0), None, None, None, None, None]
            );
            assert_eq!(
                daemons[1].inbound_in(InboundState::Refused).unwrap().len(),
                6
            );
            // pruning forgets the windows, so the sender may send again
            daemons[0].prune(i64::MAX, 0, false).unwrap();
            assert_eq!(
                daemons[0]
                    .receive_counted(&received("after"), "ws", true)
                    .unwrap()
                    .map(|(_, r)| r),
                Some(Rate::Take)
            );
        });
    }

    /// Two daemons draining one outbox at once: every row is claimed by one
    /// of them, delivered once, and each conversation's parts stay in order.
    #[test]
    fn two_daemons_draining_one_outbox_deliver_each_row_once_in_order() {
        let at = database();
        let daemons = [
            ChannelStore::open_at(&at).unwrap(),
            ChannelStore::open_at(&at).unwrap(),
        ];
        for c in 0..20 {
            let mut r = reply(&["1", "2", "3"]);
            r.conversation = format!("C{c}");
            daemons[0].finish(None, InboundState::Done, &r).unwrap();
        }
        let sent = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for (d, store) in daemons.iter().enumerate() {
                for w in 0..2 {
                    let sent = &sent;
                    s.spawn(move || {
                        let owner = format!("daemon{d}/{w}");
                        let mut idle = 0;
                        while idle < 20 {
                            let claimed = store.claim_due(&owner, 60_000, 4).unwrap();
                            if claimed.is_empty() {
                                idle += 1;
                                std::thread::sleep(std::time::Duration::from_millis(5));
                            }
                            for row in claimed {
                                sent.lock().unwrap().push((
                                    row.conversation.clone(),
                                    row.text.clone(),
                                    row.id,
                                ));
                                store.delivered(row.id, &owner).unwrap();
                            }
                        }
                    });
                }
            }
        });
        let sent = sent.into_inner().unwrap();
        assert_eq!(sent.len(), 60, "each row delivered once");
        let mut ids: Vec<i64> = sent.iter().map(|s| s.2).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 60);
        for c in 0..20 {
            let order: Vec<&str> = sent
                .iter()
                .filter(|s| s.0 == format!("C{c}"))
                .map(|s| s.1.as_str())
                .collect();
            assert_eq!(order, ["1", "2", "3"], "conversation C{c}");
        }
    }
}
