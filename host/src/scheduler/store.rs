//! Schedule runs and per-task state in `pincer.db`.
//!
//! A run is a row claimed before it starts: `UNIQUE(workspace, task, due_ms)`
//! makes the claim an `INSERT ... ON CONFLICT DO NOTHING`, so one due time is
//! claimed once, by one owner, whatever restarts or reloads happen. A claim
//! is a lease (`claimed_by`, `claimed_until_ms`), not an in-process lock, so
//! several daemons could share the table later.
//!
//! Statuses: `claimed` → `running` → `done` | `failed`; `queued` (waits for
//! the previous run, `overlap: queue`) → `claimed`; `skipped` (due while the
//! previous run was still going, `overlap: skip`); `interrupted` (its owner
//! died or its lease ran out before it finished).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::{Connection, OptionalExtension, params};

/// The state of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Queued,
    Claimed,
    Running,
    Done,
    Failed,
    Interrupted,
    Skipped,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Claimed => "claimed",
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Skipped => "skipped",
        }
    }

    fn parse(text: &str) -> Option<RunStatus> {
        Some(match text {
            "queued" => RunStatus::Queued,
            "claimed" => RunStatus::Claimed,
            "running" => RunStatus::Running,
            "done" => RunStatus::Done,
            "failed" => RunStatus::Failed,
            "interrupted" => RunStatus::Interrupted,
            "skipped" => RunStatus::Skipped,
            _ => return None,
        })
    }
}

/// One row of `schedule_runs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    pub id: i64,
    pub workspace: String,
    pub task: String,
    pub due_ms: i64,
    pub status: RunStatus,
    pub claimed_by: Option<String>,
    pub claimed_until_ms: Option<i64>,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub attempt: i64,
    pub output: Option<String>,
    pub error: Option<String>,
    pub receipts: Option<String>,
    /// `schedule` (a due time of the task's trigger) or `manual`
    /// (`pincer schedule run`).
    pub origin: String,
}

/// A task's row in `schedule_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskState {
    pub paused: bool,
    /// The cursor: every due time at or before it was handled.
    pub last_due_ms: Option<i64>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the output, and the delivery receipts (JSON), if any.
    Done {
        output: String,
        receipts: Option<String>,
    },
    /// Failed with this reason; the failure was reported to `receipts`.
    Failed {
        error: String,
        receipts: Option<String>,
    },
}

/// The scheduler's tables in `pincer.db`.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS schedule_runs (
    id               INTEGER PRIMARY KEY,
    workspace        TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    due_ms           INTEGER NOT NULL,
    status           TEXT    NOT NULL,
    claimed_by       TEXT,
    claimed_until_ms INTEGER,
    started_ms       INTEGER,
    ended_ms         INTEGER,
    attempt          INTEGER NOT NULL DEFAULT 1,
    output           TEXT,
    error            TEXT,
    receipts         TEXT,
    origin           TEXT    NOT NULL DEFAULT 'schedule',
    UNIQUE (workspace, task, due_ms)
);
CREATE INDEX IF NOT EXISTS schedule_runs_status ON schedule_runs (status);
CREATE TABLE IF NOT EXISTS schedule_state (
    workspace   TEXT    NOT NULL,
    task        TEXT    NOT NULL,
    paused      INTEGER NOT NULL DEFAULT 0,
    last_due_ms INTEGER,
    PRIMARY KEY (workspace, task)
);
";

const COLUMNS: &str = "id, workspace, task, due_ms, status, claimed_by, claimed_until_ms, \
                       started_ms, ended_ms, attempt, output, error, receipts, origin";

fn record(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    let status: String = row.get(4)?;
    Ok(RunRecord {
        id: row.get(0)?,
        workspace: row.get(1)?,
        task: row.get(2)?,
        due_ms: row.get(3)?,
        status: RunStatus::parse(&status).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                4,
                rusqlite::types::Type::Text,
                format!("unknown run status `{status}`").into(),
            )
        })?,
        claimed_by: row.get(5)?,
        claimed_until_ms: row.get(6)?,
        started_ms: row.get(7)?,
        ended_ms: row.get(8)?,
        attempt: row.get(9)?,
        output: row.get(10)?,
        error: row.get(11)?,
        receipts: row.get(12)?,
        origin: row.get(13)?,
    })
}

impl Store {
    /// Opens (creating the tables if needed) the database at `path`.
    ///
    /// # Errors
    /// If SQLite cannot open the file or create the tables.
    pub fn open(path: &Path) -> rusqlite::Result<Store> {
        Store::new(crate::db::open(path)?)
    }

    /// Uses an open connection, creating the tables if needed.
    ///
    /// # Errors
    /// If the tables cannot be created.
    pub fn new(conn: Connection) -> rusqlite::Result<Store> {
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(super::agent::SCHEMA)?;
        // databases made before `origin` existed
        let has_origin: bool = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('schedule_runs') WHERE name = 'origin'",
            [],
            |row| row.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !has_origin {
            conn.execute_batch(
                "ALTER TABLE schedule_runs ADD COLUMN origin TEXT NOT NULL DEFAULT 'schedule'",
            )?;
        }
        Ok(Store {
            conn: Mutex::new(conn),
        })
    }

    pub(super) fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the due time `due_ms` of a task with `status` (`Claimed`,
    /// `Queued` or `Skipped`); `None` when that due time already has a row
    /// (it was claimed before: do not run it).
    ///
    /// # Errors
    /// SQLite errors.
    #[allow(clippy::too_many_arguments)]
    pub fn claim(
        &self,
        workspace: &str,
        task: &str,
        due_ms: i64,
        status: RunStatus,
        owner: &str,
        lease_until_ms: i64,
        note: Option<&str>,
    ) -> rusqlite::Result<Option<i64>> {
        let conn = self.conn();
        let ended = (status == RunStatus::Skipped).then(crate::db::now_ms);
        let changed = conn.execute(
            "INSERT INTO schedule_runs
                 (workspace, task, due_ms, status, claimed_by, claimed_until_ms, ended_ms, error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (workspace, task, due_ms) DO NOTHING",
            params![
                workspace,
                task,
                due_ms,
                status.as_str(),
                owner,
                lease_until_ms,
                ended,
                note
            ],
        )?;
        Ok((changed == 1).then(|| conn.last_insert_rowid()))
    }

    /// `claimed` → `running`, by its owner. `false` if the run is not
    /// claimed by `owner` (any more).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn start(&self, run_id: i64, owner: &str, now_ms: i64) -> rusqlite::Result<bool> {
        let changed = self.conn().execute(
            "UPDATE schedule_runs SET status = 'running', started_ms = ?3
             WHERE id = ?1 AND claimed_by = ?2 AND status = 'claimed'",
            params![run_id, owner, now_ms],
        )?;
        Ok(changed == 1)
    }

    /// Ends a claimed or running run. `false` if it was neither (e.g. it was
    /// marked interrupted meanwhile).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn finish(&self, run_id: i64, outcome: &Outcome, now_ms: i64) -> rusqlite::Result<bool> {
        let (status, output, error, receipts) = match outcome {
            Outcome::Done { output, receipts } => (
                RunStatus::Done,
                Some(output.as_str()),
                None,
                receipts.as_deref(),
            ),
            Outcome::Failed { error, receipts } => (
                RunStatus::Failed,
                None,
                Some(error.as_str()),
                receipts.as_deref(),
            ),
        };
        let changed = self.conn().execute(
            "UPDATE schedule_runs
             SET status = ?2, ended_ms = ?3, output = ?4, error = ?5, receipts = ?6
             WHERE id = ?1 AND status IN ('claimed', 'running')",
            params![run_id, status.as_str(), now_ms, output, error, receipts],
        )?;
        Ok(changed == 1)
    }

    /// Marks `interrupted` every claimed or running row whose owner is not
    /// `owner` (a daemon that is gone: one daemon per database today) or
    /// whose lease ended before `now_ms`. Returns the rows it marked.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn interrupt_abandoned(
        &self,
        owner: &str,
        now_ms: i64,
    ) -> rusqlite::Result<Vec<RunRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "UPDATE schedule_runs
             SET status = 'interrupted', ended_ms = ?2,
                 error = COALESCE(error, 'interrupted: its daemon stopped or its lease ran out')
             WHERE status IN ('claimed', 'running')
               AND (claimed_by IS NOT ?1 OR claimed_until_ms < ?2)
             RETURNING {COLUMNS}"
        ))?;
        let rows = stmt
            .query_map(params![owner, now_ms], record)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// Claims an interrupted run again for `owner` (one more attempt).
    /// `false` if it is no longer interrupted.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn reclaim_interrupted(
        &self,
        run_id: i64,
        owner: &str,
        lease_until_ms: i64,
    ) -> rusqlite::Result<bool> {
        let changed = self.conn().execute(
            "UPDATE schedule_runs
             SET status = 'claimed', claimed_by = ?2, claimed_until_ms = ?3, attempt = attempt + 1,
                 started_ms = NULL, ended_ms = NULL, error = NULL
             WHERE id = ?1 AND status = 'interrupted'",
            params![run_id, owner, lease_until_ms],
        )?;
        Ok(changed == 1)
    }

    /// The task's claimed or running run, if any.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn active_run(&self, workspace: &str, task: &str) -> rusqlite::Result<Option<RunRecord>> {
        self.conn()
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM schedule_runs
                     WHERE workspace = ?1 AND task = ?2 AND status IN ('claimed', 'running')
                     ORDER BY due_ms LIMIT 1"
                ),
                params![workspace, task],
                record,
            )
            .optional()
    }

    /// Turns the task's oldest queued run into a claim for `owner`.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn claim_queued(
        &self,
        workspace: &str,
        task: &str,
        owner: &str,
        lease_until_ms: i64,
    ) -> rusqlite::Result<Option<RunRecord>> {
        let conn = self.conn();
        conn.query_row(
            &format!(
                "UPDATE schedule_runs SET status = 'claimed', claimed_by = ?3, claimed_until_ms = ?4
                 WHERE id = (SELECT id FROM schedule_runs
                             WHERE workspace = ?1 AND task = ?2 AND status = 'queued'
                             ORDER BY due_ms LIMIT 1)
                 RETURNING {COLUMNS}"
            ),
            params![workspace, task, owner, lease_until_ms],
            record,
        )
        .optional()
    }

    /// The task's latest runs, newest first.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn history(
        &self,
        workspace: &str,
        task: &str,
        limit: usize,
    ) -> rusqlite::Result<Vec<RunRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM schedule_runs WHERE workspace = ?1 AND task = ?2
             ORDER BY due_ms DESC LIMIT ?3"
        ))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![workspace, task, limit], record)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok(rows)
    }

    /// When the task's latest scheduled run (not a manual one) started, as
    /// far as the table knows: its start, else its end (an interrupted
    /// claim), else its due time. `None` when none was claimed.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn last_start_ms(&self, workspace: &str, task: &str) -> rusqlite::Result<Option<i64>> {
        self.conn().query_row(
            "SELECT MAX(COALESCE(started_ms, ended_ms, due_ms)) FROM schedule_runs
             WHERE workspace = ?1 AND task = ?2 AND origin = 'schedule'
               AND status IN ('claimed', 'running', 'done', 'failed', 'interrupted')",
            params![workspace, task],
            |row| row.get(0),
        )
    }

    /// Every due time at or before this one has been handled (claimed,
    /// queued, skipped, or passed over while paused or before the task was
    /// first seen). `None` for a task never seen.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn last_due(&self, workspace: &str, task: &str) -> rusqlite::Result<Option<i64>> {
        let value: Option<Option<i64>> = self
            .conn()
            .query_row(
                "SELECT last_due_ms FROM schedule_state WHERE workspace = ?1 AND task = ?2",
                params![workspace, task],
                |row| row.get(0),
            )
            .optional()?;
        Ok(value.flatten())
    }

    /// Sets the task's last handled due time (never moves it back).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_last_due(&self, workspace: &str, task: &str, due_ms: i64) -> rusqlite::Result<()> {
        self.conn().execute(
            "INSERT INTO schedule_state (workspace, task, last_due_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (workspace, task) DO UPDATE
             SET last_due_ms = MAX(COALESCE(last_due_ms, ?3), ?3)",
            params![workspace, task, due_ms],
        )?;
        Ok(())
    }

    /// The per-task state rows of `workspace`, by task.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn states(&self, workspace: &str) -> rusqlite::Result<HashMap<String, TaskState>> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT task, paused, last_due_ms FROM schedule_state WHERE workspace = ?1")?;
        let rows = stmt.query_map(params![workspace], |row| {
            Ok((
                row.get::<_, String>(0)?,
                TaskState {
                    paused: row.get(1)?,
                    last_due_ms: row.get(2)?,
                },
            ))
        })?;
        rows.collect()
    }

    /// Sets the cursor of each task in `tasks` that has none to `now_ms`
    /// (first sight), in one transaction.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn init_cursors(
        &self,
        workspace: &str,
        tasks: &[&str],
        now_ms: i64,
    ) -> rusqlite::Result<()> {
        if tasks.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let mut stmt = tx.prepare(
                "INSERT INTO schedule_state (workspace, task, last_due_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (workspace, task) DO UPDATE
                 SET last_due_ms = COALESCE(last_due_ms, ?3)",
            )?;
            for task in tasks {
                stmt.execute(params![workspace, task, now_ms])?;
            }
        }
        tx.commit()
    }

    /// Every paused task, as (workspace, task).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn paused_tasks(&self) -> rusqlite::Result<HashSet<(String, String)>> {
        self.pairs("SELECT workspace, task FROM schedule_state WHERE paused = 1")
    }

    /// Every task with a queued run (`overlap: queue`, catch-up, or
    /// `pincer schedule run`), as (workspace, task).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn queued_tasks(&self) -> rusqlite::Result<HashSet<(String, String)>> {
        self.pairs("SELECT DISTINCT workspace, task FROM schedule_runs WHERE status = 'queued'")
    }

    fn pairs(&self, sql: &str) -> rusqlite::Result<HashSet<(String, String)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        rows.collect()
    }

    /// Queues a run of the task now, outside its schedule (`pincer schedule
    /// run`): the running daemon starts it once no run of the task is
    /// active. Its due time is `now_ms`, moved on by a millisecond while it
    /// collides with another row (scheduled due times are whole seconds).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn queue_manual(&self, workspace: &str, task: &str, now_ms: i64) -> rusqlite::Result<i64> {
        let conn = self.conn();
        let mut due = if now_ms % 1000 == 0 {
            now_ms + 1
        } else {
            now_ms
        };
        loop {
            let changed = conn.execute(
                "INSERT INTO schedule_runs (workspace, task, due_ms, status, origin)
                 VALUES (?1, ?2, ?3, 'queued', 'manual')
                 ON CONFLICT (workspace, task, due_ms) DO NOTHING",
                params![workspace, task, due],
            )?;
            if changed == 1 {
                return Ok(conn.last_insert_rowid());
            }
            due += 1;
        }
    }

    /// One run by its id.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn run(&self, run_id: i64) -> rusqlite::Result<Option<RunRecord>> {
        self.conn()
            .query_row(
                &format!("SELECT {COLUMNS} FROM schedule_runs WHERE id = ?1"),
                params![run_id],
                record,
            )
            .optional()
    }

    /// Resumes a task and moves its cursor to `now_ms`, so due times missed
    /// while it was paused do not run (also when the daemon is down).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn resume(&self, workspace: &str, task: &str, now_ms: i64) -> rusqlite::Result<()> {
        self.conn().execute(
            "INSERT INTO schedule_state (workspace, task, paused, last_due_ms) VALUES (?1, ?2, 0, ?3)
             ON CONFLICT (workspace, task) DO UPDATE
             SET paused = 0, last_due_ms = MAX(COALESCE(last_due_ms, ?3), ?3)",
            params![workspace, task, now_ms],
        )?;
        Ok(())
    }

    /// Pauses or resumes a task (kept across restarts).
    ///
    /// # Errors
    /// SQLite errors.
    pub fn set_paused(&self, workspace: &str, task: &str, paused: bool) -> rusqlite::Result<()> {
        self.conn().execute(
            "INSERT INTO schedule_state (workspace, task, paused) VALUES (?1, ?2, ?3)
             ON CONFLICT (workspace, task) DO UPDATE SET paused = ?3",
            params![workspace, task, paused],
        )?;
        Ok(())
    }

    /// Whether the task is paused.
    ///
    /// # Errors
    /// SQLite errors.
    pub fn is_paused(&self, workspace: &str, task: &str) -> rusqlite::Result<bool> {
        let paused: Option<bool> = self
            .conn()
            .query_row(
                "SELECT paused FROM schedule_state WHERE workspace = ?1 AND task = ?2",
                params![workspace, task],
                |row| row.get(0),
            )
            .optional()?;
        Ok(paused.unwrap_or(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_store() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(crate::db::FILE_NAME);
        (dir, path)
    }

    #[test]
    fn a_due_time_is_claimed_once() {
        let (_dir, path) = temp_store();
        let store = Store::open(&path).expect("open");
        let first = store
            .claim("ws", "t", 1000, RunStatus::Claimed, "a", 5000, None)
            .expect("claim");
        assert!(first.is_some());
        let again = Store::open(&path)
            .expect("open again")
            .claim("ws", "t", 1000, RunStatus::Claimed, "b", 5000, None)
            .expect("claim");
        assert_eq!(again, None, "a second owner cannot claim the same due time");
        assert!(
            store
                .claim("ws", "t", 2000, RunStatus::Claimed, "a", 5000, None)
                .expect("claim")
                .is_some()
        );
    }

    #[test]
    fn a_restart_sees_interrupted_rows() {
        let (_dir, path) = temp_store();
        let store = Store::open(&path).expect("open");
        let run = store
            .claim("ws", "t", 1000, RunStatus::Claimed, "old", 99_000, None)
            .expect("claim")
            .expect("claimed");
        assert!(store.start(run, "old", 1100).expect("start"));
        let done = store
            .claim("ws", "t", 2000, RunStatus::Claimed, "old", 99_000, None)
            .expect("claim")
            .expect("claimed");
        let outcome = Outcome::Done {
            output: "ok".into(),
            receipts: None,
        };
        assert!(store.finish(done, &outcome, 2100).expect("finish"));
        drop(store);

        let store = Store::open(&path).expect("reopen");
        let marked = store.interrupt_abandoned("new", 3000).expect("interrupt");
        assert_eq!(marked.len(), 1);
        assert_eq!(marked[0].id, run);
        assert_eq!(marked[0].status, RunStatus::Interrupted);
        assert!(
            !store.finish(run, &outcome, 3100).expect("finish"),
            "the old owner can no longer finish it"
        );
        let history = store.history("ws", "t", 10).expect("history");
        assert_eq!(
            history.iter().map(|r| r.status).collect::<Vec<_>>(),
            [RunStatus::Done, RunStatus::Interrupted]
        );
        assert!(
            store
                .reclaim_interrupted(run, "new", 9000)
                .expect("reclaim")
        );
        assert!(
            !store
                .reclaim_interrupted(run, "new", 9000)
                .expect("reclaim")
        );
    }

    #[test]
    fn pause_and_last_due_persist() {
        let (_dir, path) = temp_store();
        let store = Store::open(&path).expect("open");
        assert!(!store.is_paused("ws", "t").expect("paused"));
        store.set_paused("ws", "t", true).expect("pause");
        store.set_last_due("ws", "t", 5000).expect("last due");
        store.set_last_due("ws", "t", 4000).expect("never back");
        drop(store);
        let store = Store::open(&path).expect("reopen");
        assert!(store.is_paused("ws", "t").expect("paused"));
        assert_eq!(store.last_due("ws", "t").expect("last"), Some(5000));
        store.set_paused("ws", "t", false).expect("resume");
        assert!(!store.is_paused("ws", "t").expect("paused"));
    }
}
