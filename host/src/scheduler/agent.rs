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
//!   sent; a longer prompt could not start a turn anyway);
//! - at most [`MAX_CREATES_PER_HOUR`] creations an hour and
//!   [`MAX_CREATES_PER_DAY`] a day per workspace;
//! - at most [`MAX_RETAINED`] cancelled tasks kept per workspace (the oldest
//!   go first), none longer than [`CANCELLED_RETENTION`]; with a cancelled
//!   task go its cursor and its run history;
//! - the audit log keeps [`audit_summary`] of a task (its size, SHA-256 and
//!   first [`AUDIT_HEAD_BYTES`] bytes), not the task;
//! - no `catch_up: all`, no `overlap: queue`, no `rerun_interrupted`, a
//!   `timeout` of at most [`MAX_TIMEOUT`]: refused (not clamped), so the
//!   agent learns what runs;
//! - a re-created id starts a fresh cursor (nothing missed before it runs),
//!   and two scheduled starts of one agent task id are at least
//!   [`MIN_START_GAP`] apart, whatever its trigger says and across cancel
//!   and re-create (the scheduler records a start too early as skipped).

use std::collections::BTreeSet;
use std::path::Path;
use std::str::FromStr as _;
use std::time::Duration;

use chrono::Utc;

use super::file::{self, Action, CatchUp, Checks, Overlap, Task};
use super::plan;
use super::store::{Store, StoreError};
use crate::args;
use crate::config::Config;
use crate::config::MAX_MESSAGE_BYTES;
use crate::db::{Conn, DbError, Row};

/// Every agent task id starts with this.
pub const ID_PREFIX: &str = "agent-";

/// Live (pending or active) agent tasks per workspace, at most.
pub const MAX_PER_WORKSPACE: usize = 20;

/// The shortest time between two fire times of an agent task.
pub const MIN_INTERVAL: Duration = Duration::from_secs(300);

/// The shortest time between two scheduled starts of an agent task id, as
/// the scheduler's clock sees them: [`MIN_INTERVAL`] less the default grace
/// of an on-time due time ([`super::DEFAULT_GRACE`], 1 minute), so a task
/// firing every 5 minutes is never skipped for a start a few seconds late.
pub const MIN_START_GAP: Duration =
    Duration::from_secs(MIN_INTERVAL.as_secs() - super::DEFAULT_GRACE.as_secs());

/// Cancelled agent tasks kept per workspace (for the record), at most; the
/// oldest are deleted first.
pub const MAX_RETAINED: usize = 20;

/// How long a cancelled agent task is kept.
pub const CANCELLED_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Agent tasks a workspace may create in any hour.
pub const MAX_CREATES_PER_HOUR: usize = 30;

/// Agent tasks a workspace may create in any 24 hours.
pub const MAX_CREATES_PER_DAY: usize = 100;

/// The longest `timeout` of an agent task (the default is
/// [`file::DEFAULT_TIMEOUT`], 10 minutes, the default
/// `agent.turn_timeout_secs`; the turn stops at that limit anyway).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Bytes of a task's JSON the audit log keeps.
pub const AUDIT_HEAD_BYTES: usize = 256;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

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
CREATE TABLE IF NOT EXISTS schedule_agent_creates (
    workspace  TEXT    NOT NULL,
    created_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS schedule_agent_creates_by_workspace
    ON schedule_agent_creates (workspace, created_ms);
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

fn row(r: &Row) -> Result<AgentTask, DbError> {
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
    if task.catch_up == CatchUp::All {
        return Err(invalid(
            "`catch_up: all`: an agent task catches up at most once after an outage; write `catch_up: once` (the default) or `skip`".into(),
        ));
    }
    if task.overlap == Overlap::Queue {
        return Err(invalid(
            "`overlap: queue`: an agent task's runs never queue; leave `overlap` out (`skip`: a due time that finds the previous run still going is skipped)".into(),
        ));
    }
    if task.approvals.is_some() {
        return Err(invalid(
            "`approvals`: who decides a task's calls is a person's choice, made in schedules.yaml; an agent task's calls that need a person are refused. Leave it out"
                .into(),
        ));
    }
    if task.rerun_interrupted {
        return Err(invalid(
            "`rerun_interrupted`: an agent task's interrupted runs are not run again; leave it out"
                .into(),
        ));
    }
    if task.timeout > MAX_TIMEOUT {
        return Err(invalid(format!(
            "`timeout: {}`: an agent task runs at most {}; write a shorter timeout (the default is {})",
            object.get("timeout").and_then(|t| t.as_str()).map_or_else(
                || humantime::format_duration(task.timeout).to_string(),
                str::to_owned
            ),
            humantime::format_duration(MAX_TIMEOUT),
            humantime::format_duration(file::DEFAULT_TIMEOUT)
        )));
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

/// What the audit log keeps of an agent task: its id, its size, the
/// SHA-256 of its JSON and its first [`AUDIT_HEAD_BYTES`] bytes (cut at a
/// character boundary, `…` when cut), never the whole task.
pub fn audit_summary(id: &str, spec: &serde_json::Value) -> String {
    use sha2::Digest as _;
    let text = spec.to_string();
    let digest = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    let end = text.floor_char_boundary(AUDIT_HEAD_BYTES);
    let more = if end < text.len() { "…" } else { "" };
    format!(
        "{id}: {} bytes, sha256 {digest}: {}{more}",
        text.len(),
        &text[..end]
    )
}

/// Adds the prefix to an id the agent chose (`digest` → `agent-digest`).
pub fn prefixed(id: &str) -> String {
    if id.starts_with(ID_PREFIX) {
        id.to_owned()
    } else {
        format!("{ID_PREFIX}{id}")
    }
}

/// Why [`Store::add_agent_task`]'s transaction stopped: a refusal rolls
/// back what it did so far, as a database error does.
enum Stop {
    Db(DbError),
    Refused(Refusal),
}

impl From<DbError> for Stop {
    fn from(e: DbError) -> Self {
        Stop::Db(e)
    }
}

impl Store {
    /// Stores a checked agent task as `status` (pending or active). A
    /// cancelled task of that id is replaced, and its cursor, queued runs
    /// and run history's claim on the future go with it: the new task
    /// counts its due times from its first sight, like any new task.
    ///
    /// # Errors
    /// [`Refusal::Invalid`] when a live task has that id, the workspace has
    /// [`MAX_PER_WORKSPACE`] live tasks, or it created
    /// [`MAX_CREATES_PER_HOUR`] in the last hour or [`MAX_CREATES_PER_DAY`]
    /// in the last day (nothing is stored then); database errors as
    /// [`StoreError`] in the outer result.
    pub fn add_agent_task(
        &self,
        workspace: &str,
        id: &str,
        spec: &serde_json::Value,
        status: Status,
        now_ms: i64,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let spec = spec.to_string();
        let added = self.db().transaction(|tx| -> Result<(), Stop> {
            let refuse = |m: String| Err(Stop::Refused(Refusal::Invalid(m)));
            purge_expired(tx, Some(workspace), now_ms, false)?;
            let existing: Option<String> = tx
                .query_opt(
                    "SELECT status FROM schedule_agent_tasks WHERE workspace = ?1 AND id = ?2",
                    args![workspace, id],
                )?
                .map(|r| r.get(0))
                .transpose()?;
            if existing
                .as_deref()
                .is_some_and(|s| Status::parse(s) != Status::Cancelled)
            {
                return refuse(format!(
                    "a task `{id}` exists already: cancel it first or choose another id"
                ));
            }
            let live: usize = tx
                .query_one(
                    "SELECT COUNT(*) FROM schedule_agent_tasks
                     WHERE workspace = ?1 AND status IN ('pending', 'active')",
                    args![workspace],
                )?
                .get(0)?;
            if live >= MAX_PER_WORKSPACE {
                return refuse(format!(
                    "this workspace has {MAX_PER_WORKSPACE} scheduled tasks of the agent already: cancel one first"
                ));
            }
            for (window_ms, limit, what) in [
                (HOUR_MS, MAX_CREATES_PER_HOUR, "hour"),
                (DAY_MS, MAX_CREATES_PER_DAY, "24 hours"),
            ] {
                let row = tx.query_one(
                    "SELECT COUNT(*), MIN(created_ms) FROM schedule_agent_creates
                     WHERE workspace = ?1 AND created_ms > ?2",
                    args![workspace, now_ms - window_ms],
                )?;
                let (count, oldest): (usize, Option<i64>) = (row.get(0)?, row.get(1)?);
                if count >= limit {
                    let wait_ms = oldest
                        .map_or(window_ms, |o| o + window_ms - now_ms)
                        .max(1000);
                    let wait = Duration::from_secs(u64::try_from(wait_ms / 1000).unwrap_or(0));
                    return refuse(format!(
                        "this workspace's agent created {limit} tasks in the last {what}, the most it may: try again in {}",
                        humantime::format_duration(wait)
                    ));
                }
            }
            if existing.is_some() {
                forget_runs(tx, workspace, id, false)?;
            }
            tx.execute(
                "INSERT INTO schedule_agent_tasks
                     (workspace, id, spec, status, created_ms, changed_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT (workspace, id) DO UPDATE
                 SET spec = ?3, status = ?4, created_ms = ?5, decided_by = NULL, decided_ms = NULL,
                     changed_ms = ?5",
                args![workspace, id, spec.as_str(), status.as_str(), now_ms],
            )?;
            tx.execute(
                "INSERT INTO schedule_agent_creates (workspace, created_ms) VALUES (?1, ?2)",
                args![workspace, now_ms],
            )?;
            Ok(())
        });
        match added {
            Ok(()) => Ok(Ok(())),
            Err(Stop::Refused(refusal)) => Ok(Err(refusal)),
            Err(Stop::Db(e)) => Err(e.into()),
        }
    }

    /// Deletes cancelled agent tasks older than [`CANCELLED_RETENTION`] and
    /// those past the [`MAX_RETAINED`] newest of their workspace, with their
    /// cursors and runs (the audit log keeps their summary). Returns how
    /// many tasks; with `dry_run` counts them and deletes nothing.
    ///
    /// # Errors
    /// Database errors.
    pub fn purge_agent_tasks(&self, now_ms: i64, dry_run: bool) -> Result<usize, StoreError> {
        self.db()
            .transaction(|tx| purge_expired(tx, None, now_ms, dry_run))
            .map_err(StoreError::from)
    }

    /// Agent tasks of `workspace` (every workspace when `None`), oldest
    /// first; cancelled ones only with `cancelled`.
    ///
    /// # Errors
    /// Database errors.
    pub fn agent_tasks(
        &self,
        workspace: Option<&str>,
        cancelled: bool,
    ) -> Result<Vec<AgentTask>, StoreError> {
        self.db().run(|conn| {
            conn.query(
                &format!(
                    "SELECT {COLUMNS} FROM schedule_agent_tasks
                     WHERE (CAST(?1 AS TEXT) IS NULL OR workspace = ?1)
                       AND (?2 OR status != 'cancelled')
                     ORDER BY created_ms, id"
                ),
                args![workspace, cancelled],
            )?
            .iter()
            .map(|r| Ok(row(r)?))
            .collect()
        })
    }

    /// One agent task.
    ///
    /// # Errors
    /// Database errors.
    pub fn agent_task(&self, workspace: &str, id: &str) -> Result<Option<AgentTask>, StoreError> {
        self.db().run(|conn| {
            Ok(conn
                .query_opt(
                    &format!(
                        "SELECT {COLUMNS} FROM schedule_agent_tasks WHERE workspace = ?1 AND id = ?2"
                    ),
                    args![workspace, id],
                )?
                .as_ref()
                .map(row)
                .transpose()?)
        })
    }

    /// Moves an agent task from one of `from` to `to`, recording who did it.
    /// `false` when it was in none of `from`.
    ///
    /// # Errors
    /// Database errors.
    pub fn decide_agent_task(
        &self,
        workspace: &str,
        id: &str,
        from: &[Status],
        to: Status,
        by: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.db().transaction(|tx| {
            let current: Option<String> = tx
                .query_opt(
                    "SELECT status FROM schedule_agent_tasks WHERE workspace = ?1 AND id = ?2",
                    args![workspace, id],
                )?
                .map(|r| r.get(0))
                .transpose()?;
            let Some(current) = current else {
                return Ok(false);
            };
            if !from.contains(&Status::parse(&current)) {
                return Ok(false);
            }
            let changed = tx.execute(
                "UPDATE schedule_agent_tasks
                 SET status = ?3, decided_by = ?4, decided_ms = ?5, changed_ms = ?5
                 WHERE workspace = ?1 AND id = ?2 AND status = ?6",
                args![workspace, id, to.as_str(), by, now_ms, current],
            )?;
            if changed == 1 && to == Status::Cancelled {
                // nothing of it waits to run
                forget_runs(tx, workspace, id, true)?;
                purge_expired(tx, Some(workspace), now_ms, false)?;
            }
            Ok(changed == 1)
        })
    }

    /// Changes whenever an agent task is added or decided (the daemon polls
    /// it to reload).
    ///
    /// # Errors
    /// Database errors.
    pub fn agent_revision(&self) -> Result<(i64, i64), StoreError> {
        self.db().run(|conn| {
            let row = conn.query_one(
                "SELECT COUNT(*), COALESCE(MAX(changed_ms), 0) FROM schedule_agent_tasks",
                args![],
            )?;
            Ok((row.get(0)?, row.get(1)?))
        })
    }
}

/// Marks the task's queued runs skipped; unless `keep_cursor`, also
/// forgets its cursor (a re-created id counts from its first sight).
fn forget_runs(
    tx: &mut dyn Conn,
    workspace: &str,
    id: &str,
    keep_cursor: bool,
) -> Result<(), DbError> {
    tx.execute(
        "UPDATE schedule_runs SET status = 'skipped', error = 'the task was cancelled'
         WHERE workspace = ?1 AND task = ?2 AND status = 'queued'",
        args![workspace, id],
    )?;
    if !keep_cursor {
        tx.execute(
            "DELETE FROM schedule_state WHERE workspace = ?1 AND task = ?2",
            args![workspace, id],
        )?;
    }
    Ok(())
}

/// Deletes (in `tx`) the cancelled agent tasks of `workspace` (all when
/// `None`) decided before [`CANCELLED_RETENTION`] or past the
/// [`MAX_RETAINED`] newest, with their cursors and runs, and creation
/// records older than a day. Returns how many tasks; with `dry_run` only
/// counts them.
fn purge_expired(
    tx: &mut dyn Conn,
    workspace: Option<&str>,
    now_ms: i64,
    dry_run: bool,
) -> Result<usize, DbError> {
    let retention_ms = i64::try_from(CANCELLED_RETENTION.as_millis()).unwrap_or(i64::MAX);
    let keep = i64::try_from(MAX_RETAINED).unwrap_or(i64::MAX);
    let doomed = tx.query(
        "SELECT workspace, id FROM (
             SELECT workspace, id, COALESCE(decided_ms, changed_ms) AS at,
                    ROW_NUMBER() OVER (PARTITION BY workspace
                                       ORDER BY COALESCE(decided_ms, changed_ms) DESC, id) AS n
             FROM schedule_agent_tasks
             WHERE status = 'cancelled' AND (CAST(?1 AS TEXT) IS NULL OR workspace = ?1)) AS cancelled
         WHERE at < ?2 OR n > ?3",
        args![workspace, now_ms.saturating_sub(retention_ms), keep],
    )?;
    if dry_run {
        return Ok(doomed.len());
    }
    for doomed in &doomed {
        let (workspace, id): (String, String) = (doomed.get(0)?, doomed.get(1)?);
        for sql in [
            "DELETE FROM schedule_agent_tasks WHERE workspace = ?1 AND id = ?2",
            "DELETE FROM schedule_state WHERE workspace = ?1 AND task = ?2",
            "DELETE FROM schedule_runs WHERE workspace = ?1 AND task = ?2",
        ] {
            tx.execute(sql, args![&workspace, &id])?;
        }
    }
    tx.execute(
        "DELETE FROM schedule_agent_creates
         WHERE (CAST(?1 AS TEXT) IS NULL OR workspace = ?1) AND created_ms <= ?2",
        args![workspace, now_ms - DAY_MS],
    )?;
    Ok(doomed.len())
}

/// The active agent tasks of `workspace`, checked as at creation; the ones
/// that no longer pass (the configuration changed) come back as errors.
///
/// # Errors
/// Database errors.
pub fn active_tasks(
    store: &Store,
    config: &Config,
    workspace: &str,
) -> Result<(Vec<Task>, Vec<String>), StoreError> {
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
