//! Conversations as the host stores them: sessions keyed by (channel,
//! conversation, workspace), their messages in the OpenAI chat shape, the
//! turns that produced them (status, usage, tool calls). The host's database
//! is the single source of truth: every message is written as it
//! arrives, so a container killed mid-turn loses nothing already said.

mod history;

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::args;
use crate::db::{Conn, Db, DbError, Dialect, Location, Row, now_ms};

pub use history::{Trimmed, trim_to_budget};

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session store: {0}")]
    Db(#[from] DbError),
    #[error("session store: a stored message is not valid JSON: {0}")]
    Corrupt(#[from] serde_json::Error),
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
    db: Db,
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

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS sessions (
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
    );";

const TURN_COLUMNS: &str = "t.id, t.session_id, t.status, t.started_ms, t.ended_ms, t.steps,
    t.prompt_tokens, t.completion_tokens, t.error,
    (SELECT COUNT(*) FROM tool_calls c WHERE c.turn_id = t.id)";

impl SessionStore {
    pub fn open(home: &Path) -> Result<Self, SessionError> {
        Self::open_at(&Location::from(home.join(crate::db::FILE_NAME).as_path()))
    }

    pub fn open_at(location: &Location) -> Result<Self, SessionError> {
        let db = Db::open(location)?;
        db.transaction(|conn| conn.schema(SCHEMA))?;
        Ok(SessionStore { db })
    }

    /// The open session of `key`, created when there is none.
    pub fn current(&self, key: &SessionKey) -> Result<Session, SessionError> {
        // One transaction: two daemons asking at once get the same session.
        self.db.transaction(|tx| {
            let found = tx.query_opt(
                "SELECT id, created_ms FROM sessions
                 WHERE channel = ?1 AND conversation = ?2 AND workspace = ?3 AND closed_ms IS NULL",
                args![&key.channel, &key.conversation, &key.workspace],
            )?;
            match found {
                Some(row) => Ok(Session {
                    id: row.get(0)?,
                    key: key.clone(),
                    created_ms: row.get(1)?,
                }),
                None => insert_session(tx, key),
            }
        })
    }

    /// Closes the open session of `key` (if any) and opens a fresh one.
    pub fn start_new(&self, key: &SessionKey) -> Result<Session, SessionError> {
        self.db.transaction(|tx| {
            tx.execute(
                "UPDATE sessions SET closed_ms = ?4
                 WHERE channel = ?1 AND conversation = ?2 AND workspace = ?3 AND closed_ms IS NULL",
                args![&key.channel, &key.conversation, &key.workspace, now_ms()],
            )?;
            insert_session(tx, key)
        })
    }

    /// Records a new running turn of `session`.
    pub fn begin_turn(&self, session_id: i64, turn_id: &str) -> Result<(), SessionError> {
        self.db.transaction(|tx| {
            let exists: bool = tx
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
                    args![session_id],
                )?
                .get(0)?;
            if !exists {
                return Err(SessionError::UnknownSession(session_id));
            }
            tx.execute(
                "INSERT INTO turns (id, session_id, status, started_ms)
                 VALUES (?1, ?2, 'running', ?3)",
                args![turn_id, session_id, now_ms()],
            )?;
            Ok(())
        })
    }

    fn execute(&self, sql: &str, args: &[crate::db::Value]) -> Result<(), SessionError> {
        self.db.run(|conn| Ok(conn.execute(sql, args).map(drop)?))
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
        self.execute(
            "INSERT INTO session_messages (session_id, turn_id, role, message, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            args![session_id, turn_id, role, message.to_string(), now_ms()],
        )
    }

    /// Adds one model call's usage to the turn.
    pub fn add_usage(
        &self,
        turn_id: &str,
        prompt_tokens: u64,
        completion_tokens: u64,
    ) -> Result<(), SessionError> {
        self.execute(
            "UPDATE turns SET prompt_tokens = prompt_tokens + ?2,
                completion_tokens = completion_tokens + ?3, steps = steps + 1
             WHERE id = ?1",
            args![turn_id, prompt_tokens, completion_tokens],
        )
    }

    pub fn record_tool_call(
        &self,
        turn_id: &str,
        call: &ToolCallRecord,
    ) -> Result<(), SessionError> {
        self.execute(
            "INSERT INTO tool_calls (turn_id, call_id, name, arguments, ok, output_bytes, truncated, duration_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            args![
                turn_id,
                &call.call_id,
                &call.name,
                &call.arguments,
                call.ok,
                call.output_bytes,
                call.truncated,
                call.duration_ms,
            ],
        )
    }

    /// Marks the turn ended with `status` (and the error, when it failed).
    pub fn finish_turn(
        &self,
        turn_id: &str,
        status: TurnStatus,
        error: Option<&str>,
    ) -> Result<(), SessionError> {
        self.execute(
            "UPDATE turns SET status = ?2, error = ?3, ended_ms = ?4 WHERE id = ?1",
            args![turn_id, status.as_str(), error, now_ms()],
        )
    }

    /// Sessions matching `filter`, newest first.
    pub fn list(&self, filter: &SessionFilter) -> Result<Vec<SessionSummary>, SessionError> {
        // The sender lives in the channels' inbound table, which exists once
        // a channel store opened this database.
        let by_sender = if filter.sender.is_some() {
            "AND EXISTS (SELECT 1 FROM channel_inbound i JOIN turns t ON t.id = i.turn_id
                 WHERE t.session_id = s.id AND (i.sender = ?3 OR i.sender_name = ?3))"
        } else {
            "AND CAST(?3 AS TEXT) IS NULL"
        };
        let position = match self.db.dialect() {
            Dialect::Sqlite => "instr",
            Dialect::Postgres => "strpos",
        };
        let sql = format!(
            "SELECT s.id, s.channel, s.conversation, s.workspace, s.created_ms, s.closed_ms,
                    (SELECT MAX(created_ms) FROM session_messages m WHERE m.session_id = s.id),
                    (SELECT COUNT(*) FROM session_messages m WHERE m.session_id = s.id)
             FROM sessions s
             WHERE (CAST(?1 AS TEXT) IS NULL OR s.workspace = ?1)
               AND (CAST(?2 AS TEXT) IS NULL OR s.channel = ?2) {by_sender}
               AND (CAST(?4 AS TEXT) IS NULL OR EXISTS (SELECT 1 FROM session_messages m
                    WHERE m.session_id = s.id
                      AND {position}(lower(m.message), lower(CAST(?4 AS TEXT))) > 0))
               AND (CAST(?5 AS BIGINT) IS NULL OR s.id < ?5)
             ORDER BY s.id DESC LIMIT ?6"
        );
        let args = args![
            &filter.workspace,
            &filter.channel,
            &filter.sender,
            &filter.text,
            filter.before_id,
            filter.limit,
        ];
        self.db.run(|conn| {
            conn.query(&sql, args)?
                .iter()
                .map(|row| {
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
                })
                .collect()
        })
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
        // Turns begun in the same millisecond are ordered by their first
        // message (a session's turns run one after another), not by
        // insertion order, which PostgreSQL does not keep.
        self.db.run(|conn| {
            conn.query(
                &format!(
                    "SELECT {TURN_COLUMNS} FROM turns t WHERE t.session_id = ?1
                     ORDER BY t.started_ms,
                        (SELECT MIN(m.id) FROM session_messages m WHERE m.turn_id = t.id)
                            NULLS LAST,
                        t.id"
                ),
                args![session_id],
            )?
            .iter()
            .map(turn_row)
            .collect()
        })
    }

    /// Every message of the session, oldest first.
    pub fn messages(&self, session_id: i64) -> Result<Vec<StoredMessage>, SessionError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT turn_id, message FROM session_messages WHERE session_id = ?1 ORDER BY id",
                args![session_id],
            )?
            .iter()
            .map(|row| {
                Ok(StoredMessage {
                    turn_id: row.get(0)?,
                    message: serde_json::from_str(&row.get::<String>(1)?)?,
                })
            })
            .collect()
        })
    }

    pub fn turn(&self, turn_id: &str) -> Result<Option<TurnRecord>, SessionError> {
        self.db.run(|conn| {
            conn.query_opt(
                &format!("SELECT {TURN_COLUMNS} FROM turns t WHERE t.id = ?1"),
                args![turn_id],
            )?
            .as_ref()
            .map(turn_row)
            .transpose()
        })
    }

    /// Tool calls of a turn, in the order they finished.
    pub fn tool_calls(&self, turn_id: &str) -> Result<Vec<ToolCallRecord>, SessionError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT call_id, name, arguments, ok, output_bytes, truncated, duration_ms
                 FROM tool_calls WHERE turn_id = ?1 ORDER BY id",
                args![turn_id],
            )?
            .iter()
            .map(|row| {
                Ok(ToolCallRecord {
                    call_id: row.get(0)?,
                    name: row.get(1)?,
                    arguments: row.get(2)?,
                    ok: row.get(3)?,
                    output_bytes: row.get::<i64>(4)?.try_into().unwrap_or(0),
                    truncated: row.get(5)?,
                    duration_ms: row.get::<i64>(6)?.try_into().unwrap_or(0),
                })
            })
            .collect()
        })
    }
}

fn turn_row(row: &Row) -> Result<TurnRecord, SessionError> {
    Ok(TurnRecord {
        id: row.get(0)?,
        session_id: row.get(1)?,
        status: TurnStatus::parse(&row.get::<String>(2)?),
        started_ms: row.get(3)?,
        ended_ms: row.get(4)?,
        steps: row.get(5)?,
        prompt_tokens: row.get::<i64>(6)?.try_into().unwrap_or(0),
        completion_tokens: row.get::<i64>(7)?.try_into().unwrap_or(0),
        error: row.get(8)?,
        tool_calls: row.get::<i64>(9)?.try_into().unwrap_or(0),
    })
}

fn insert_session(conn: &mut dyn Conn, key: &SessionKey) -> Result<Session, SessionError> {
    let created_ms = now_ms();
    let id = conn
        .query_one(
            "INSERT INTO sessions (channel, conversation, workspace, created_ms)
             VALUES (?1, ?2, ?3, ?4) RETURNING id",
            args![&key.channel, &key.conversation, &key.workspace, created_ms],
        )?
        .get(0)?;
    Ok(Session {
        id,
        key: key.clone(),
        created_ms,
    })
}

#[cfg(test)]
mod tests;
