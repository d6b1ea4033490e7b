//! Tasks the agent schedules for itself, through the `schedule__create`,
//! `schedule__list` and `schedule__cancel` tools of its gateway endpoint.
//!
//! They live in `pincer.db` (`schedule_agent_tasks`), never in
//! `schedules.yaml`, which only people write. Whether the tools exist at all
//! is `workspaces.NAME.agent_schedules` (`none` by default); with `propose`
//! a new task waits, disabled, until a person runs `pincer schedule approve
//! ID`; with `auto` it is active at once. Either way the audit log records
//! it as the agent's.
//!
//! What the agent may schedule is narrower than a file task:
//! - only prompts (an agent turn in its own workspace), no skill calls;
//! - ids carry the prefix [`ID_PREFIX`], which `schedules.yaml` refuses, so
//!   an agent task can neither shadow nor be shadowed by a person's;
//! - output only to channels whose default conversation belongs to the
//!   workspace (`channel:NAME`), so a task cannot carry the workspace's data
//!   to another conversation;
//! - at most [`MAX_PER_WORKSPACE`] live tasks, firing at most once every
//!   [`MIN_INTERVAL`], each at most [`MAX_MESSAGE_BYTES`] of JSON (stored as
//!   sent; a longer prompt could not start a turn anyway).

use std::collections::BTreeSet;
use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use chrono::Utc;
use rusqlite::{OptionalExtension as _, params};

use super::file::{self, Action, Checks, Task};
use super::plan;
use super::store::Store;
use crate::config::Config;
use crate::router::MAX_MESSAGE_BYTES;

/// Every agent task id starts with this.
pub const ID_PREFIX: &str = "agent-";

/// Live (pending or active) agent tasks per workspace, at most.
pub const MAX_PER_WORKSPACE: usize = 20;

/// The shortest time between two fire times of an agent task.
pub const MIN_INTERVAL: Duration = Duration::from_secs(300);

/// The state of an agent task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Waits for `pincer schedule approve`.
    Pending,
    /// Loaded by the daemon like a file task.
    Active,
    /// Cancelled by the agent or a person, or rejected; kept for the record.
    Cancelled,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Active => "active",
            Status::Cancelled => "cancelled",
        }
    }

    fn parse(text: &str) -> Status {
        match text {
            "pending" => Status::Pending,
            "active" => Status::Active,
            _ => Status::Cancelled,
        }
    }
}

/// One row of `schedule_agent_tasks`.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTask {
    pub workspace: String,
    /// With [`ID_PREFIX`].
    pub id: String,
    /// The task as the agent gave it (the keys of a `schedules.yaml` task),
    /// with the prefixed id.
    pub spec: serde_json::Value,
    pub status: Status,
    pub created_ms: i64,
    /// Who approved, rejected or cancelled it, and when.
    pub decided_by: Option<String>,
    pub decided_ms: Option<i64>,
}

/// Why an agent task was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    /// The agent can fix it (the message says how).
    #[error("{0}")]
    Invalid(String),
}

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS schedule_agent_tasks (
    workspace  TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    spec       TEXT    NOT NULL,
    status     TEXT    NOT NULL,
    created_ms INTEGER NOT NULL,
    decided_by TEXT,
    decided_ms INTEGER,
    changed_ms INTEGER NOT NULL,
    PRIMARY KEY (workspace, id)
);
";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AgentTask> {
    let spec: String = r.get(2)?;
    let status: String = r.get(3)?;
    Ok(AgentTask {
        workspace: r.get(0)?,
        id: r.get(1)?,
        spec: serde_json::from_str(&spec).unwrap_or(serde_json::Value::Null),
        status: Status::parse(&status),
        created_ms: r.get(4)?,
        decided_by: r.get(5)?,
        decided_ms: r.get(6)?,
    })
}

const COLUMNS: &str = "workspace, id, spec, status, created_ms, decided_by, decided_ms";

/// The checks an agent task of `workspace` passes, as for a file task plus
/// the agent's own limits (module docs). Returns the checked task.
///
/// # Errors
/// [`Refusal::Invalid`] saying what to change.
pub fn check(config: &Config, workspace: &str, spec: &serde_json::Value) -> Result<Task, Refusal> {
    let invalid = |m: String| Refusal::Invalid(m);
    // The spec is stored in the host's database as the container sent it.
    let size = spec.to_string().len();
    if size > MAX_MESSAGE_BYTES {
        return Err(invalid(format!(
            "the task is {size} bytes of JSON; an agent task is at most {MAX_MESSAGE_BYTES} ({} KiB), the size of a message",
            MAX_MESSAGE_BYTES / 1024
        )));
    }
    let object = spec
        .as_object()
        .ok_or_else(|| invalid("a task is a JSON object".into()))?;
    for key in ["skill", "tool", "skill_input"] {
        if object.contains_key(key) {
            return Err(invalid(format!(
                "`{key}`: an agent task is a prompt (an agent turn in this workspace); skill calls are scheduled by people in schedules.yaml"
            )));
        }
    }
    let channels = own_channels(config, workspace);
    let refuse_skill = |_: &str| Err("agent tasks cannot call skills".to_owned());
    let checks = Checks {
        default_zone: default_zone(config),
        channels: Some(&channels),
        // own_channels has only channels with a default conversation
        without_default: None,
        skill: Some(&refuse_skill),
        tools: None,
    };
    let task = file::parse_one(spec, Path::new("task"), &checks, true).map_err(|e| {
        let text = e.to_string();
        // "task:1:23: message": the position in a one-line JSON text helps nobody
        invalid(strip_location(&text).to_owned())
    })?;
    if !matches!(task.action, Action::Prompt(_)) {
        return Err(invalid("an agent task needs a `prompt`".into()));
    }
    for to in &task.deliver_to {
        if to.conversation.is_some() || to.thread.is_some() {
            return Err(invalid(format!(
                "deliver_to: write `channel:{}`; an agent task delivers only to a channel's default conversation",
                to.channel
            )));
        }
    }
    let upcoming = plan::upcoming(&task, Utc::now(), 12);
    if let Some(gap) = upcoming
        .windows(2)
        .map(|w| w[1] - w[0])
        .min()
        .and_then(|gap| gap.to_std().ok())
        && gap < MIN_INTERVAL
    {
        return Err(invalid(format!(
            "this task would fire every {}; agent tasks fire at most once every {}",
            humantime::format_duration(gap),
            humantime::format_duration(MIN_INTERVAL)
        )));
    }
    Ok(task)
}

fn strip_location(text: &str) -> &str {
    let mut rest = text;
    for _ in 0..3 {
        match rest.split_once(':') {
            Some((_, tail)) => rest = tail,
            None => return text.trim(),
        }
    }
    rest.trim()
}

/// The zone of tasks that give none: `timezone:` in `pincer.yaml`, else the
/// host's.
pub fn default_zone(config: &Config) -> chrono_tz::Tz {
    config
        .timezone
        .as_deref()
        .and_then(|z| chrono_tz::Tz::from_str(z).ok())
        .unwrap_or_else(file::host_zone)
}

/// Channels whose default conversation belongs to `workspace`.
fn own_channels(config: &Config, workspace: &str) -> BTreeSet<String> {
    config
        .channels
        .iter()
        .filter(|(_, c)| {
            c.default_conversation.as_ref().is_some_and(|conversation| {
                c.conversations.get(conversation).unwrap_or(&c.workspace) == workspace
            })
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Adds the prefix to an id the agent chose (`digest` → `agent-digest`).
pub fn prefixed(id: &str) -> String {
    if id.starts_with(ID_PREFIX) {
        id.to_owned()
    } else {
        format!("{ID_PREFIX}{id}")
    }
}

impl Store {
    /// Stores a checked agent task as `status` (pending or active).
    ///
    /// # Errors
    /// [`Refusal::Invalid`] when a live task has that id or the workspace
    /// has [`MAX_PER_WORKSPACE`] live tasks; database errors as
    /// `rusqlite::Error` in the outer result.
    pub fn add_agent_task(
        &self,
        workspace: &str,
        id: &str,
        spec: &serde_json::Value,
        status: Status,
        now_ms: i64,
    ) -> rusqlite::Result<Result<(), Refusal>> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let existing: Option<String> = tx
            .query_row(
                "SELECT status FROM schedule_agent_tasks WHERE workspace = ?1 AND id = ?2",
                params![workspace, id],
                |r| r.get(0),
            )
            .optional()?;
        if existing.is_some_and(|s| Status::parse(&s) != Status::Cancelled) {
            return Ok(Err(Refusal::Invalid(format!(
                "a task `{id}` exists already: cancel it first or choose another id"
            ))));
        }
        let live: i64 = tx.query_row(
            "SELECT COUNT(*) FROM schedule_agent_tasks
             WHERE workspace = ?1 AND status IN ('pending', 'active')",
            params![workspace],
            |r| r.get(0),
        )?;
        if usize::try_from(live).unwrap_or(usize::MAX) >= MAX_PER_WORKSPACE {
            return Ok(Err(Refusal::Invalid(format!(
                "this workspace has {MAX_PER_WORKSPACE} scheduled tasks of the agent already: cancel one first"
            ))));
        }
        tx.execute(
            "INSERT INTO schedule_agent_tasks
                 (workspace, id, spec, status, created_ms, changed_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
             ON CONFLICT (workspace, id) DO UPDATE
             SET spec = ?3, status = ?4, created_ms = ?5, decided_by = NULL, decided_ms = NULL,
                 changed_ms = ?5",
            params![workspace, id, spec.to_string(), status.as_str(), now_ms],
        )?;
        tx.commit()?;
        Ok(Ok(()))
    }

    /// Agent tasks of `workspace` (every workspace when `None`), oldest
    /// first; cancelled ones only with `cancelled`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn agent_tasks(
        &self,
        workspace: Option<&str>,
        cancelled: bool,
    ) -> rusqlite::Result<Vec<AgentTask>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM schedule_agent_tasks
             WHERE (?1 IS NULL OR workspace = ?1) AND (?2 OR status != 'cancelled')
             ORDER BY created_ms, id"
        ))?;
        let rows = stmt.query_map(params![workspace, cancelled], row)?;
        rows.collect()
    }

    /// One agent task.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn agent_task(&self, workspace: &str, id: &str) -> rusqlite::Result<Option<AgentTask>> {
        self.conn()
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM schedule_agent_tasks WHERE workspace = ?1 AND id = ?2"
                ),
                params![workspace, id],
                row,
            )
            .optional()
    }

    /// Moves an agent task from one of `from` to `to`, recording who did it.
    /// `false` when it was in none of `from`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn decide_agent_task(
        &self,
        workspace: &str,
        id: &str,
        from: &[Status],
        to: Status,
        by: &str,
        now_ms: i64,
    ) -> rusqlite::Result<bool> {
        let conn = self.conn();
        let current: Option<String> = conn
            .query_row(
                "SELECT status FROM schedule_agent_tasks WHERE workspace = ?1 AND id = ?2",
                params![workspace, id],
                |r| r.get(0),
            )
            .optional()?;
        let Some(current) = current else {
            return Ok(false);
        };
        if !from.contains(&Status::parse(&current)) {
            return Ok(false);
        }
        let changed = conn.execute(
            "UPDATE schedule_agent_tasks
             SET status = ?3, decided_by = ?4, decided_ms = ?5, changed_ms = ?5
             WHERE workspace = ?1 AND id = ?2 AND status = ?6",
            params![workspace, id, to.as_str(), by, now_ms, current],
        )?;
        Ok(changed == 1)
    }

    /// Changes whenever an agent task is added or decided (the daemon polls
    /// it to reload).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn agent_revision(&self) -> rusqlite::Result<(i64, i64)> {
        self.conn().query_row(
            "SELECT COUNT(*), COALESCE(MAX(changed_ms), 0) FROM schedule_agent_tasks",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }
}

/// The active agent tasks of `workspace`, checked as at creation; the ones
/// that no longer pass (the configuration changed) come back as errors.
///
/// # Errors
/// SQLite errors.
pub fn active_tasks(
    store: &Store,
    config: &Config,
    workspace: &str,
) -> rusqlite::Result<(Vec<Task>, Vec<String>)> {
    let mut tasks = Vec::new();
    let mut problems = Vec::new();
    for agent_task in store.agent_tasks(Some(workspace), false)? {
        if agent_task.status != Status::Active {
            continue;
        }
        match check(config, workspace, &agent_task.spec) {
            Ok(task) => tasks.push(task),
            Err(e) => problems.push(format!("agent task `{}`: {e}", agent_task.id)),
        }
    }
    Ok((tasks, problems))
}
