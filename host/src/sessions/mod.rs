//! Conversations as the host stores them: sessions keyed by (channel,
//! conversation, workspace), their messages in the OpenAI chat shape, the
//! turns that produced them (status, usage, tool calls). The host's SQLite
//! file is the single source of truth: every message is written as it
//! arrives, so a container killed mid-turn loses nothing already said.

mod history;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use crate::db::now_ms;

pub use history::{Trimmed, trim_to_budget};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session store: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("session store: a stored message is not valid JSON: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error("session store: lock poisoned by a panicked thread")]
    Poisoned,
    #[error("no session with id {0}")]
    UnknownSession(i64),
}

/// Where a conversation happens: the channel (`cli`, `slack`, ...), the
/// conversation within it, and the workspace that answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct SessionKey {
    pub channel: String,
    pub conversation: String,
    pub workspace: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Session {
    pub id: i64,
    pub key: SessionKey,
    pub created_ms: i64,
}

/// A stored message and the turn it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredMessage {
    pub turn_id: String,
    pub message: Value,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Running,
    Done,
    Failed,
    Cancelled,
}

impl TurnStatus {
    fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Running => "running",
            TurnStatus::Done => "done",
            TurnStatus::Failed => "failed",
            TurnStatus::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> TurnStatus {
        match s {
            "done" => TurnStatus::Done,
            "failed" => TurnStatus::Failed,
            "cancelled" => TurnStatus::Cancelled,
            _ => TurnStatus::Running,
        }
    }
}

/// One turn as recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnRecord {
    pub id: String,
    pub session_id: i64,
    pub status: TurnStatus,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub steps: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub tool_calls: u64,
    pub error: Option<String>,
}

/// A finished tool call, as reported by the runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallRecord {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub ok: bool,
    pub output_bytes: u64,
    pub truncated: bool,
    pub duration_ms: u64,
}

pub struct SessionStore {
    conn: Mutex<Connection>,
}

/// Which sessions [`SessionStore::list`] returns; every field narrows.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    pub workspace: Option<String>,
    pub channel: Option<String>,
    /// A platform sender id or display name of a message in the session.
    pub sender: Option<String>,
    /// Text in one of the session's messages (case-insensitive for ASCII).
    pub text: Option<String>,
    /// Only sessions older than this id (the next page).
    pub before_id: Option<i64>,
    pub limit: u32,
}

/// A session as listed: its key, when it began and was last active, how
/// many messages it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    pub id: i64,
    pub key: SessionKey,
    pub created_ms: i64,
    pub closed_ms: Option<i64>,
    pub last_ms: Option<i64>,
    pub messages: i64,
}

impl SessionStore {
    pub fn open(home: &Path) -> Result<Self, SessionError> {
        let conn = crate::db::open(&home.join(crate::db::FILE_NAME))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS sessions (
                id INTEGER PRIMARY KEY,
                channel TEXT NOT NULL,
                conversation TEXT NOT NULL,
                workspace TEXT NOT NULL,
                created_ms INTEGER NOT NULL,
                closed_ms INTEGER
            );
            CREATE UNIQUE INDEX IF NOT EXISTS sessions_open
                ON sessions (channel, conversation, workspace) WHERE closed_ms IS NULL;
            CREATE TABLE IF NOT EXISTS turns (
                id TEXT PRIMARY KEY,
                session_id INTEGER NOT NULL REFERENCES sessions (id),
                status TEXT NOT NULL,
                started_ms INTEGER NOT NULL,
                ended_ms INTEGER,
                steps INTEGER NOT NULL DEFAULT 0,
                prompt_tokens INTEGER NOT NULL DEFAULT 0,
                completion_tokens INTEGER NOT NULL DEFAULT 0,
                error TEXT
            );
            CREATE TABLE IF NOT EXISTS session_messages (
                id INTEGER PRIMARY KEY,
                session_id INTEGER NOT NULL REFERENCES sessions (id),
                turn_id TEXT NOT NULL REFERENCES turns (id),
                role TEXT NOT NULL,
                message TEXT NOT NULL,
                created_ms INTEGER NOT NULL
            );
            CREATE INDEX IF NOT EXISTS session_messages_by_session
                ON session_messages (session_id, id);
            CREATE TABLE IF NOT EXISTS tool_calls (
                id INTEGER PRIMARY KEY,
                turn_id TEXT NOT NULL REFERENCES turns (id),
                call_id TEXT NOT NULL,
                name TEXT NOT NULL,
                arguments TEXT NOT NULL,
                ok INTEGER NOT NULL,
                output_bytes INTEGER NOT NULL,
                truncated INTEGER NOT NULL,
                duration_ms INTEGER NOT NULL
            );",
        )?;
        Ok(SessionStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> Result<MutexGuard<'_, Connection>, SessionError> {
        self.conn.lock().map_err(|_| SessionError::Poisoned)
    }

    /// The open session of `key`, created when there is none.
    pub fn current(&self, key: &SessionKey) -> Result<Session, SessionError> {
        let conn = self.conn()?;
        let found = conn
            .query_row(
                "SELECT id, created_ms FROM sessions
                 WHERE channel = ?1 AND conversation = ?2 AND workspace = ?3 AND closed_ms IS NULL",
                params![key.channel, key.conversation, key.workspace],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        if let Some((id, created_ms)) = found {
            return Ok(Session {
                id,
                key: key.clone(),
                created_ms,
            });
        }
        insert_session(&conn, key)
    }

    /// Closes the open session of `key` (if any) and opens a fresh one.
    pub fn start_new(&self, key: &SessionKey) -> Result<Session, SessionError> {
        let mut conn = self.conn()?;
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE sessions SET closed_ms = ?4
             WHERE channel = ?1 AND conversation = ?2 AND workspace = ?3 AND closed_ms IS NULL",
            params![key.channel, key.conversation, key.workspace, now_ms()],
        )?;
        let session = insert_session(&tx, key)?;
        tx.commit()?;
        Ok(session)
    }

    /// Records a new running turn of `session`.
    pub fn begin_turn(&self, session_id: i64, turn_id: &str) -> Result<(), SessionError> {
        let conn = self.conn()?;
        let exists: bool = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
            params![session_id],
            |row| row.get(0),
        )?;
        if !exists {
            return Err(SessionError::UnknownSession(session_id));
        }
        conn.execute(
            "INSERT INTO turns (id, session_id, status, started_ms) VALUES (?1, ?2, 'running', ?3)",
            params![turn_id, session_id, now_ms()],
        )?;
        Ok(())
    }

    /// Appends one message (OpenAI chat shape) to the session, as part of
    /// `turn_id`.
    pub fn append(
        &self,
        session_id: i64,
        turn_id: &str,
        message: &Value,
    ) -> Result<(), SessionError> {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        self.conn()?.execute(
            "INSERT INTO session_messages (session_id, turn_id, role, message, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![session_id, turn_id, role, message.to_string(), now_ms()],
        )?;
        Ok(())
    }

    /// Adds one model call's usage to the turn.
    pub fn add_usage(
        &self,
        turn_id: &str,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Result<(), SessionError> {
        self.conn()?.execute(
            "UPDATE turns SET prompt_tokens = prompt_tokens + ?2,
                completion_tokens = completion_tokens + ?3, steps = steps + 1
             WHERE id = ?1",
            params![
                turn_id,
                i64::try_from(prompt_tokens).unwrap_or(i64::MAX),
                i64::try_from(completion_tokens).unwrap_or(i64::MAX)
            ],
        )?;
        Ok(())
    }

    pub fn record_tool_call(
        &self,
        turn_id: &str,
        call: &ToolCallRecord,
    ) -> Result<(), SessionError> {
        self.conn()?.execute(
            "INSERT INTO tool_calls (turn_id, call_id, name, arguments, ok, output_bytes, truncated, duration_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                turn_id,
                call.call_id,
                call.name,
                call.arguments,
                call.ok,
                i64::try_from(call.output_bytes).unwrap_or(i64::MAX),
                call.truncated,
                i64::try_from(call.duration_ms).unwrap_or(i64::MAX)
            ],
        )?;
        Ok(())
    }

    /// Marks the turn ended with `status` (and the error, when it failed).
    pub fn finish_turn(
        &self,
        turn_id: &str,
        status: TurnStatus,
        error: Option<&str>,
    ) -> Result<(), SessionError> {
        self.conn()?.execute(
            "UPDATE turns SET status = ?2, error = ?3, ended_ms = ?4 WHERE id = ?1",
            params![turn_id, status.as_str(), error, now_ms()],
        )?;
        Ok(())
    }

    /// Sessions matching `filter`, newest first.
    pub fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionSummary>, SessionError> {
        let conn = self.conn()?;
        // The sender lives in the channels' inbound table, which exists once
        // a channel store opened this database.
        let by_sender = if filter.sender.is_some() {
            "AND EXISTS (SELECT 1 FROM channel_inbound i JOIN turns t ON t.id = i.turn_id
                 WHERE t.session_id = s.id AND (i.sender = ?3 OR i.sender_name = ?3))"
        } else {
            "AND ?3 IS NULL"
        };
        let sql = format!(
            "SELECT s.id, s.channel, s.conversation, s.workspace, s.created_ms, s.closed_ms,
                    (SELECT MAX(created_ms) FROM session_messages m WHERE m.session_id = s.id),
                    (SELECT COUNT(*) FROM session_messages m WHERE m.session_id = s.id)
             FROM sessions s
             WHERE (?1 IS NULL OR s.workspace = ?1) AND (?2 IS NULL OR s.channel = ?2) {by_sender}
               AND (?4 IS NULL OR EXISTS (SELECT 1 FROM session_messages m
                    WHERE m.session_id = s.id AND instr(lower(m.message), lower(?4)) > 0))
               AND (?5 IS NULL OR s.id < ?5)
             ORDER BY s.id DESC LIMIT ?6"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            params![
                filter.workspace,
                filter.channel,
                filter.sender,
                filter.text,
                filter.before_id,
                filter.limit
            ],
            |row| {
                Ok(SessionSummary {
                    id: row.get(0)?,
                    key: SessionKey {
                        channel: row.get(1)?,
                        conversation: row.get(2)?,
                        workspace: row.get(3)?,
                    },
                    created_ms: row.get(4)?,
                    closed_ms: row.get(5)?,
                    last_ms: row.get(6)?,
                    messages: row.get(7)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One session by id.
    pub fn get(&self, id: i64) -> Result<Option<SessionSummary>, SessionError> {
        Ok(self
            .list(&SessionFilter {
                before_id: id.checked_add(1),
                limit: 1,
                ..SessionFilter::default()
            })?
            .into_iter()
            .find(|s| s.id == id))
    }

    /// The turns of a session, oldest first.
    pub fn turns(&self, session_id: i64) -> Result<Vec<TurnRecord>, SessionError> {
        let ids: Vec<String> = {
            let conn = self.conn()?;
            let mut stmt = conn
                .prepare("SELECT id FROM turns WHERE session_id = ?1 ORDER BY started_ms, rowid")?;
            stmt.query_map([session_id], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        let mut out = Vec::new();
        for id in ids {
            if let Some(turn) = self.turn(&id)? {
                out.push(turn);
            }
        }
        Ok(out)
    }

    /// Every message of the session, oldest first.
    pub fn messages(&self, session_id: i64) -> Result<Vec<StoredMessage>, SessionError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT turn_id, message FROM session_messages WHERE session_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![session_id], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (turn_id, text) = row?;
            out.push(StoredMessage {
                turn_id,
                message: serde_json::from_str(&text)?,
            });
        }
        Ok(out)
    }

    pub fn turn(&self, turn_id: &str) -> Result<Option<TurnRecord>, SessionError> {
        let conn = self.conn()?;
        Ok(conn
            .query_row(
                "SELECT t.id, t.session_id, t.status, t.started_ms, t.ended_ms, t.steps,
                        t.prompt_tokens, t.completion_tokens, t.error,
                        (SELECT COUNT(*) FROM tool_calls c WHERE c.turn_id = t.id)
                 FROM turns t WHERE t.id = ?1",
                params![turn_id],
                |row| {
                    Ok(TurnRecord {
                        id: row.get(0)?,
                        session_id: row.get(1)?,
                        status: TurnStatus::parse(&row.get::<_, String>(2)?),
                        started_ms: row.get(3)?,
                        ended_ms: row.get(4)?,
                        steps: row.get(5)?,
                        prompt_tokens: row.get::<_, i64>(6)?.try_into().unwrap_or(0),
                        completion_tokens: row.get::<_, i64>(7)?.try_into().unwrap_or(0),
                        error: row.get(8)?,
                        tool_calls: row.get::<_, i64>(9)?.try_into().unwrap_or(0),
                    })
                },
            )
            .optional()?)
    }

    /// Tool calls of a turn, in the order they finished.
    pub fn tool_calls(&self, turn_id: &str) -> Result<Vec<ToolCallRecord>, SessionError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare(
            "SELECT call_id, name, arguments, ok, output_bytes, truncated, duration_ms
             FROM tool_calls WHERE turn_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map(params![turn_id], |row| {
            Ok(ToolCallRecord {
                call_id: row.get(0)?,
                name: row.get(1)?,
                arguments: row.get(2)?,
                ok: row.get(3)?,
                output_bytes: row.get::<_, i64>(4)?.try_into().unwrap_or(0),
                truncated: row.get(5)?,
                duration_ms: row.get::<_, i64>(6)?.try_into().unwrap_or(0),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn insert_session(conn: &Connection, key: &SessionKey) -> Result<Session, SessionError> {
    let created_ms = now_ms();
    conn.execute(
        "INSERT INTO sessions (channel, conversation, workspace, created_ms) VALUES (?1, ?2, ?3, ?4)",
        params![key.channel, key.conversation, key.workspace, created_ms],
    )?;
    Ok(Session {
        id: conn.last_insert_rowid(),
        key: key.clone(),
        created_ms,
    })
}

#[cfg(test)]
mod tests;
