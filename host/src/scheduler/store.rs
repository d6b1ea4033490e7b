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

use crate::args;
use crate::db::{Db, DbError, Location, Row};

/// A failure of the scheduler's tables.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(#[from] DbError);

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
pub struct Store {
    db: Db,
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

fn record(row: &Row) -> Result<RunRecord, DbError> {
    let status: String = row.get(4)?;
    Ok(RunRecord {
        id: row.get(0)?,
        workspace: row.get(1)?,
        task: row.get(2)?,
        due_ms: row.get(3)?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| DbError::Unsupported(format!("unknown run status `{status}`")))?,
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
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_at(&Location::from(path))
    }

    /// Opens the state at `location`, creating the tables if needed.
    ///
    /// # Errors
    /// If the database cannot be opened or the tables created.
    pub fn open_at(location: &Location) -> Result<Store, StoreError> {
        let db = Db::open(location)?;
        db.transaction(|conn| -> Result<(), DbError> {
            conn.schema(SCHEMA)?;
            conn.schema(super::agent::SCHEMA)?;
            // databases made before `origin` existed
            conn.add_missing_columns(
                "schedule_runs",
                &[("origin", "TEXT NOT NULL DEFAULT 'schedule'")],
            )
        })?;
        Ok(Store { db })
    }

    pub(super) fn db(&self) -> &Db {
        &self.db
    }

    /// Records the due time `due_ms` of a task with `status` (`Claimed`,
    /// `Queued` or `Skipped`); `None` when that due time already has a row
    /// (it was claimed before: do not run it).
    ///
    /// # Errors
    /// Database errors.
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
    ) -> Result<Option<i64>, StoreError> {
        let ended = (status == RunStatus::Skipped).then(crate::db::now_ms);
        let args = args![
            workspace,
            task,
            due_ms,
            status.as_str(),
            owner,
            lease_until_ms,
            ended,
            note
        ];
        self.db.run(|conn| {
            let inserted = conn.query_opt(
                "INSERT INTO schedule_runs
                     (workspace, task, due_ms, status, claimed_by, claimed_until_ms, ended_ms, error)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (workspace, task, due_ms) DO NOTHING
                 RETURNING id",
                args,
            )?;
            Ok(inserted.map(|row| row.get(0)).transpose()?)
        })
    }

    /// `claimed` → `running`, by its owner. `false` if the run is not
    /// claimed by `owner` (any more).
    ///
    /// # Errors
    /// Database errors.
    pub fn start(&self, run_id: i64, owner: &str, now_ms: i64) -> Result<bool, StoreError> {
        self.changed_one(
            "UPDATE schedule_runs SET status = 'running', started_ms = ?3
             WHERE id = ?1 AND claimed_by = ?2 AND status = 'claimed'",
            args![run_id, owner, now_ms],
        )
    }

    /// Ends a claimed or running run. `false` if it was neither (e.g. it was
    /// marked interrupted meanwhile).
    ///
    /// # Errors
    /// Database errors.
    pub fn finish(&self, run_id: i64, outcome: &Outcome, now_ms: i64) -> Result<bool, StoreError> {
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
        self.changed_one(
            "UPDATE schedule_runs
             SET status = ?2, ended_ms = ?3, output = ?4, error = ?5, receipts = ?6
             WHERE id = ?1 AND status IN ('claimed', 'running')",
            args![run_id, status.as_str(), now_ms, output, error, receipts],
        )
    }

    /// Runs `sql`; whether it changed exactly one row.
    fn changed_one(&self, sql: &str, args: &[crate::db::Value]) -> Result<bool, StoreError> {
        self.db.run(|conn| Ok(conn.execute(sql, args)? == 1))
    }

    /// Runs `sql`, which reads rows of `schedule_runs` ([`COLUMNS`]).
    fn records(&self, sql: &str, args: &[crate::db::Value]) -> Result<Vec<RunRecord>, StoreError> {
        self.db.run(|conn| {
            Ok(conn
                .query(sql, args)?
                .iter()
                .map(record)
                .collect::<Result<_, _>>()?)
        })
    }

    /// Marks `interrupted` every claimed or running row whose owner is not
    /// among the daemons `alive` (it died, or stopped without ending it) or
    /// whose lease ended before `now_ms`. Returns the rows it marked.
    ///
    /// # Errors
    /// Database errors.
    pub fn interrupt_abandoned(
        &self,
        alive: &[String],
        now_ms: i64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        // Read first: most ticks find nothing abandoned and write nothing.
        let abandoned = self
            .db
            .run(|conn| -> Result<Vec<(i64, String, i64)>, DbError> {
                let mut found = Vec::new();
                for row in conn.query(
                    "SELECT id, claimed_by, claimed_until_ms FROM schedule_runs
                 WHERE status IN ('claimed', 'running')",
                    args![],
                )? {
                    let (id, by, until): (i64, Option<String>, Option<i64>) =
                        (row.get(0)?, row.get(1)?, row.get(2)?);
                    let gone = by.as_ref().is_none_or(|by| !alive.contains(by));
                    if gone || until.is_some_and(|until| until < now_ms) {
                        found.push((id, by.unwrap_or_default(), until.unwrap_or(-1)));
                    }
                }
                Ok(found)
            })?;
        if abandoned.is_empty() {
            return Ok(Vec::new());
        }
        self.db.transaction(|tx| {
            let mut marked = Vec::new();
            for (id, by, until) in &abandoned {
                // Only if its claim is still the one read: an owner that
                // renewed it meanwhile is running it.
                let row = tx.query_opt(
                    &format!(
                        "UPDATE schedule_runs
                         SET status = 'interrupted', ended_ms = ?2,
                             error = COALESCE(error, 'interrupted: its daemon stopped or its lease ran out')
                         WHERE id = ?1 AND status IN ('claimed', 'running')
                           AND COALESCE(claimed_by, '') = ?3
                           AND COALESCE(claimed_until_ms, -1) = ?4
                         RETURNING {COLUMNS}"
                    ),
                    args![*id, now_ms, by, *until],
                )?;
                if let Some(row) = row {
                    marked.push(record(&row)?);
                }
            }
            Ok(marked)
        })
    }

    /// Claims an interrupted run again for `owner` (one more attempt).
    /// `false` if it is no longer interrupted.
    ///
    /// # Errors
    /// Database errors.
    pub fn reclaim_interrupted(
        &self,
        run_id: i64,
        owner: &str,
        lease_until_ms: i64,
    ) -> Result<bool, StoreError> {
        self.changed_one(
            "UPDATE schedule_runs
             SET status = 'claimed', claimed_by = ?2, claimed_until_ms = ?3, attempt = attempt + 1,
                 started_ms = NULL, ended_ms = NULL, error = NULL
             WHERE id = ?1 AND status = 'interrupted'",
            args![run_id, owner, lease_until_ms],
        )
    }

    /// The task's claimed or running run, if any.
    ///
    /// # Errors
    /// Database errors.
    pub fn active_run(&self, workspace: &str, task: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(self
            .records(
                &format!(
                    "SELECT {COLUMNS} FROM schedule_runs
                     WHERE workspace = ?1 AND task = ?2 AND status IN ('claimed', 'running')
                     ORDER BY due_ms LIMIT 1"
                ),
                args![workspace, task],
            )?
            .pop())
    }

    /// Turns the task's oldest queued run into a claim for `owner`.
    ///
    /// # Errors
    /// Database errors.
    pub fn claim_queued(
        &self,
        workspace: &str,
        task: &str,
        owner: &str,
        lease_until_ms: i64,
    ) -> Result<Option<RunRecord>, StoreError> {
        let sql = format!(
            "UPDATE schedule_runs SET status = 'claimed', claimed_by = ?3, claimed_until_ms = ?4
             WHERE id = (SELECT id FROM schedule_runs
                         WHERE workspace = ?1 AND task = ?2 AND status = 'queued'
                         ORDER BY due_ms LIMIT 1)
             RETURNING {COLUMNS}"
        );
        // A transaction: on PostgreSQL two daemons could otherwise both
        // pick the same row in the subquery and both claim it.
        self.db.transaction(|tx| {
            tx.query_opt(&sql, args![workspace, task, owner, lease_until_ms])?
                .as_ref()
                .map(record)
                .transpose()
                .map_err(StoreError::from)
        })
    }

    /// The task's latest runs, newest first.
    ///
    /// # Errors
    /// Database errors.
    pub fn history(
        &self,
        workspace: &str,
        task: &str,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.records(
            &format!(
                "SELECT {COLUMNS} FROM schedule_runs WHERE workspace = ?1 AND task = ?2
                 ORDER BY due_ms DESC LIMIT ?3"
            ),
            args![workspace, task, limit],
        )
    }

    /// When the task's latest scheduled run (not a manual one) started, as
    /// far as the table knows: its start, else its end (an interrupted
    /// claim), else its due time. `None` when none was claimed.
    ///
    /// # Errors
    /// Database errors.
    pub fn last_start_ms(&self, workspace: &str, task: &str) -> Result<Option<i64>, StoreError> {
        self.db.run(|conn| {
            Ok(conn
                .query_one(
                    "SELECT MAX(COALESCE(started_ms, ended_ms, due_ms)) FROM schedule_runs
                     WHERE workspace = ?1 AND task = ?2 AND origin = 'schedule'
                       AND status IN ('claimed', 'running', 'done', 'failed', 'interrupted')",
                    args![workspace, task],
                )?
                .get(0)?)
        })
    }

    /// Every due time at or before this one has been handled (claimed,
    /// queued, skipped, or passed over while paused or before the task was
    /// first seen). `None` for a task never seen.
    ///
    /// # Errors
    /// Database errors.
    pub fn last_due(&self, workspace: &str, task: &str) -> Result<Option<i64>, StoreError> {
        self.db.run(|conn| {
            let row = conn.query_opt(
                "SELECT last_due_ms FROM schedule_state WHERE workspace = ?1 AND task = ?2",
                args![workspace, task],
            )?;
            Ok(row.map(|row| row.get(0)).transpose()?.flatten())
        })
    }

    /// Sets the task's last handled due time (never moves it back).
    ///
    /// # Errors
    /// Database errors.
    pub fn set_last_due(&self, workspace: &str, task: &str, due_ms: i64) -> Result<(), StoreError> {
        self.db.run(|conn| {
            conn.execute(
                "INSERT INTO schedule_state (workspace, task, last_due_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (workspace, task) DO UPDATE
                 SET last_due_ms = CASE WHEN schedule_state.last_due_ms > ?3
                                    THEN schedule_state.last_due_ms ELSE ?3 END",
                args![workspace, task, due_ms],
            )?;
            Ok(())
        })
    }

    /// The per-task state rows of `workspace`, by task.
    ///
    /// # Errors
    /// Database errors.
    pub fn states(&self, workspace: &str) -> Result<HashMap<String, TaskState>, StoreError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT task, paused, last_due_ms FROM schedule_state WHERE workspace = ?1",
                args![workspace],
            )?
            .iter()
            .map(|row| {
                Ok((
                    row.get(0)?,
                    TaskState {
                        paused: row.get(1)?,
                        last_due_ms: row.get(2)?,
                    },
                ))
            })
            .collect()
        })
    }

    /// Sets the cursor of each task in `tasks` that has none to `now_ms`
    /// (first sight), in one transaction.
    ///
    /// # Errors
    /// Database errors.
    pub fn init_cursors(
        &self,
        workspace: &str,
        tasks: &[&str],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        if tasks.is_empty() {
            return Ok(());
        }
        self.db.transaction(|tx| {
            for task in tasks {
                tx.execute(
                    "INSERT INTO schedule_state (workspace, task, last_due_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT (workspace, task) DO UPDATE
                     SET last_due_ms = COALESCE(schedule_state.last_due_ms, ?3)",
                    args![workspace, *task, now_ms],
                )?;
            }
            Ok(())
        })
    }

    /// Every paused task, as (workspace, task).
    ///
    /// # Errors
    /// Database errors.
    pub fn paused_tasks(&self) -> Result<HashSet<(String, String)>, StoreError> {
        self.pairs("SELECT workspace, task FROM schedule_state WHERE paused = 1")
    }

    /// Every task with a queued run (`overlap: queue`, catch-up, or
    /// `pincer schedule run`), as (workspace, task).
    ///
    /// # Errors
    /// Database errors.
    pub fn queued_tasks(&self) -> Result<HashSet<(String, String)>, StoreError> {
        self.pairs("SELECT DISTINCT workspace, task FROM schedule_runs WHERE status = 'queued'")
    }

    fn pairs(&self, sql: &str) -> Result<HashSet<(String, String)>, StoreError> {
        self.db.run(|conn| {
            conn.query(sql, args![])?
                .iter()
                .map(|row| Ok((row.get(0)?, row.get(1)?)))
                .collect()
        })
    }

    /// Queues a run of the task now, outside its schedule (`pincer schedule
    /// run`): the running daemon starts it once no run of the task is
    /// active. Its due time is `now_ms`, moved on by a millisecond while it
    /// collides with another row (scheduled due times are whole seconds).
    ///
    /// # Errors
    /// Database errors.
    pub fn queue_manual(
        &self,
        workspace: &str,
        task: &str,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let mut due = if now_ms % 1000 == 0 {
            now_ms + 1
        } else {
            now_ms
        };
        self.db.run(|conn| {
            loop {
                let inserted = conn.query_opt(
                    "INSERT INTO schedule_runs (workspace, task, due_ms, status, origin)
                     VALUES (?1, ?2, ?3, 'queued', 'manual')
                     ON CONFLICT (workspace, task, due_ms) DO NOTHING
                     RETURNING id",
                    args![workspace, task, due],
                )?;
                if let Some(row) = inserted {
                    return Ok(row.get(0)?);
                }
                due += 1;
            }
        })
    }

    /// One run by its id.
    ///
    /// # Errors
    /// Database errors.
    pub fn run(&self, run_id: i64) -> Result<Option<RunRecord>, StoreError> {
        Ok(self
            .records(
                &format!("SELECT {COLUMNS} FROM schedule_runs WHERE id = ?1"),
                args![run_id],
            )?
            .pop())
    }

    /// Resumes a task and moves its cursor to `now_ms`, so due times missed
    /// while it was paused do not run (also when the daemon is down).
    ///
    /// # Errors
    /// Database errors.
    pub fn resume(&self, workspace: &str, task: &str, now_ms: i64) -> Result<(), StoreError> {
        self.db.run(|conn| {
            conn.execute(
                "INSERT INTO schedule_state (workspace, task, paused, last_due_ms)
                 VALUES (?1, ?2, 0, ?3)
                 ON CONFLICT (workspace, task) DO UPDATE
                 SET paused = 0,
                     last_due_ms = CASE WHEN schedule_state.last_due_ms > ?3
                                     THEN schedule_state.last_due_ms ELSE ?3 END",
                args![workspace, task, now_ms],
            )?;
            Ok(())
        })
    }

    /// Pauses or resumes a task (kept across restarts).
    ///
    /// # Errors
    /// Database errors.
    pub fn set_paused(&self, workspace: &str, task: &str, paused: bool) -> Result<(), StoreError> {
        self.db.run(|conn| {
            conn.execute(
                "INSERT INTO schedule_state (workspace, task, paused) VALUES (?1, ?2, ?3)
                 ON CONFLICT (workspace, task) DO UPDATE SET paused = ?3",
                args![workspace, task, paused],
            )?;
            Ok(())
        })
    }

    /// Whether the task is paused.
    ///
    /// # Errors
    /// Database errors.
    pub fn is_paused(&self, workspace: &str, task: &str) -> Result<bool, StoreError> {
        self.db.run(|conn| {
            let row = conn.query_opt(
                "SELECT paused FROM schedule_state WHERE workspace = ?1 AND task = ?2",
                args![workspace, task],
            )?;
            Ok(row.map(|row| row.get(0)).transpose()?.unwrap_or(false))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    #[test]
    fn a_due_time_is_claimed_once() {
        each_backend(|at| {
            let store = Store::open_at(at).expect("open");
            let first = store
                .claim("ws", "t", 1000, RunStatus::Claimed, "a", 5000, None)
                .expect("claim");
            assert!(first.is_some());
            let again = Store::open_at(at)
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
        });
    }

    #[test]
    fn a_restart_sees_interrupted_rows() {
        each_backend(|at| {
            let store = Store::open_at(at).expect("open");
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

            let store = Store::open_at(at).expect("reopen");
            // Another daemon alive beside "old" (a cluster): nothing marked.
            let alive = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            let none = store
                .interrupt_abandoned(&alive(&["old", "new"]), 3000)
                .expect("interrupt");
            assert_eq!(none, [], "the runs of a live daemon are its own");
            let marked = store
                .interrupt_abandoned(&alive(&["new"]), 3000)
                .expect("interrupt");
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
        });
    }

    #[test]
    fn pause_and_last_due_persist() {
        each_backend(|at| {
            let store = Store::open_at(at).expect("open");
            assert!(!store.is_paused("ws", "t").expect("paused"));
            store.set_paused("ws", "t", true).expect("pause");
            store.set_last_due("ws", "t", 5000).expect("last due");
            store.set_last_due("ws", "t", 4000).expect("never back");
            drop(store);
            let store = Store::open_at(at).expect("reopen");
            assert!(store.is_paused("ws", "t").expect("paused"));
            assert_eq!(store.last_due("ws", "t").expect("last"), Some(5000));
            store.set_paused("ws", "t", false).expect("resume");
            assert!(!store.is_paused("ws", "t").expect("paused"));
        });
    }

    #[test]
    fn cursors_queues_and_manual_runs_read_back_the_same() {
        each_backend(|at| {
            let store = Store::open_at(at).expect("open");
            store.init_cursors("ws", &["a", "b"], 100).expect("init");
            store.set_last_due("ws", "a", 50).expect("never back");
            store.init_cursors("ws", &["a"], 200).expect("kept");
            let states = store.states("ws").expect("states");
            assert_eq!(
                states.get("a"),
                Some(&TaskState {
                    paused: false,
                    last_due_ms: Some(100)
                })
            );
            store.set_paused("ws", "b", true).expect("pause");
            assert_eq!(
                store.paused_tasks().expect("paused"),
                HashSet::from([("ws".to_owned(), "b".to_owned())])
            );
            store.resume("ws", "b", 300).expect("resume");
            store.resume("ws", "b", 250).expect("resume");
            assert!(store.paused_tasks().expect("paused").is_empty());
            assert_eq!(store.last_due("ws", "b").expect("last"), Some(300));

            let first = store.queue_manual("ws", "m", 1000).expect("queue");
            let second = store.queue_manual("ws", "m", 1000).expect("queue");
            assert_eq!(
                store.queued_tasks().expect("queued"),
                HashSet::from([("ws".to_owned(), "m".to_owned())])
            );
            let queued = store.run(second).expect("run").expect("stored");
            assert_eq!(
                (queued.due_ms, queued.status, queued.origin.as_str()),
                (1002, RunStatus::Queued, "manual")
            );
            let claimed = store.claim_queued("ws", "m", "me", 9000).expect("claim");
            assert_eq!(claimed.map(|r| (r.id, r.due_ms)), Some((first, 1001)));
            assert_eq!(
                store.active_run("ws", "m").expect("active").map(|r| r.id),
                Some(first)
            );
            assert_eq!(
                store.last_start_ms("ws", "m").expect("last"),
                None,
                "manual"
            );

            let skipped = store
                .claim("ws", "s", 3000, RunStatus::Skipped, "me", 0, Some("busy"))
                .expect("claim")
                .expect("new");
            let skipped = store.run(skipped).expect("run").expect("stored");
            assert!(skipped.ended_ms.is_some());
            assert_eq!(skipped.error.as_deref(), Some("busy"));
            assert_eq!(store.last_start_ms("ws", "s").expect("last"), None);
            let run = store
                .claim("ws", "s", 4000, RunStatus::Claimed, "me", 9000, None)
                .expect("claim")
                .expect("new");
            assert_eq!(store.last_start_ms("ws", "s").expect("last"), Some(4000));
            assert!(store.start(run, "me", 4100).expect("start"));
            assert_eq!(store.last_start_ms("ws", "s").expect("last"), Some(4100));
            let newest = store.history("ws", "s", 1).expect("history");
            assert_eq!(newest.iter().map(|r| r.id).collect::<Vec<_>>(), [run]);
        });
    }

    #[test]
    fn agent_tasks_are_added_refused_decided_and_purged_the_same() {
        use super::super::agent::{Refusal, Status};
        each_backend(|at| {
            let store = Store::open_at(at).expect("open");
            let spec = serde_json::json!({"id": "agent-a", "every": "1h", "prompt": "p"});
            let now = 1_000_000_000;
            let add = |id: &str, now| {
                store
                    .add_agent_task("ws", id, &spec, Status::Active, now)
                    .expect("add")
            };
            assert_eq!(add("agent-a", now), Ok(()));
            assert_eq!(
                add("agent-a", now),
                Err(Refusal::Invalid(
                    "a task `agent-a` exists already: cancel it first or choose another id".into()
                ))
            );
            assert_eq!(store.agent_revision().expect("revision"), (1, now));
            assert!(
                !store
                    .decide_agent_task(
                        "ws",
                        "agent-a",
                        &[Status::Pending],
                        Status::Active,
                        "p",
                        now
                    )
                    .expect("decide"),
                "not pending"
            );
            let live = [Status::Pending, Status::Active];
            assert!(
                store
                    .decide_agent_task("ws", "agent-a", &live, Status::Cancelled, "p", now + 1)
                    .expect("decide")
            );
            assert!(
                store
                    .agent_tasks(Some("ws"), false)
                    .expect("tasks")
                    .is_empty()
            );
            let kept = store
                .agent_task("ws", "agent-a")
                .expect("task")
                .expect("kept");
            assert_eq!(
                (kept.status, kept.decided_by.as_deref(), kept.spec),
                (Status::Cancelled, Some("p"), spec.clone())
            );
            assert_eq!(add("agent-a", now + 2), Ok(()), "a cancelled id is reused");
            assert_eq!(store.agent_tasks(None, true).expect("tasks").len(), 1);
            store
                .decide_agent_task("ws", "agent-a", &live, Status::Cancelled, "p", now + 3)
                .expect("decide");

            let week =
                i64::try_from(super::super::agent::CANCELLED_RETENTION.as_millis()).expect("ms");
            assert_eq!(
                store
                    .purge_agent_tasks(now + week + 4, true)
                    .expect("count"),
                1
            );
            assert_eq!(store.agent_tasks(None, true).expect("tasks").len(), 1);
            assert_eq!(
                store
                    .purge_agent_tasks(now + week + 4, false)
                    .expect("purge"),
                1
            );
            assert!(store.agent_tasks(None, true).expect("tasks").is_empty());
        });
    }

    /// Two daemons on one PostgreSQL database, both finding the same due
    /// times due at once: each due time is claimed by exactly one of them.
    #[test]
    fn a_due_time_two_daemons_claim_at_once_fires_once() {
        let at = database();
        let daemons = [
            Store::open_at(&at).expect("open"),
            Store::open_at(&at).expect("open"),
        ];
        let claimed = std::sync::Mutex::new(Vec::new());
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            for (d, store) in daemons.iter().enumerate() {
                for w in 0..2 {
                    let (claimed, start) = (&claimed, &start);
                    s.spawn(move || {
                        let owner = format!("daemon{d}/{w}");
                        start.wait();
                        for due in 0..200 {
                            if let Some(id) = store
                                .claim(
                                    "ws",
                                    "t",
                                    due * 1000,
                                    RunStatus::Claimed,
                                    &owner,
                                    9000,
                                    None,
                                )
                                .expect("claim")
                            {
                                claimed.lock().expect("lock").push((due, id));
                            }
                        }
                    });
                }
            }
        });
        let mut claimed = claimed.into_inner().expect("lock");
        claimed.sort_unstable();
        assert_eq!(
            claimed.iter().map(|c| c.0).collect::<Vec<_>>(),
            (0..200).collect::<Vec<_>>(),
            "each due time claimed once"
        );
        assert_eq!(
            daemons[1].history("ws", "t", 500).expect("history").len(),
            200
        );
    }

    /// Two daemons taking a task's queued runs at once: each queued run is
    /// claimed by one of them, once.
    #[test]
    fn a_queued_run_two_daemons_take_at_once_is_claimed_once() {
        let at = database();
        let daemons = [
            Store::open_at(&at).expect("open"),
            Store::open_at(&at).expect("open"),
        ];
        for i in 0..30 {
            daemons[0].queue_manual("ws", "t", i * 10).expect("queue");
        }
        let claimed = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for (d, store) in daemons.iter().enumerate() {
                for w in 0..2 {
                    let claimed = &claimed;
                    s.spawn(move || {
                        let owner = format!("daemon{d}/{w}");
                        while let Some(run) =
                            store.claim_queued("ws", "t", &owner, 9000).expect("claim")
                        {
                            assert_eq!(run.claimed_by.as_deref(), Some(owner.as_str()));
                            claimed.lock().expect("lock").push(run.id);
                        }
                    });
                }
            }
        });
        let mut claimed = claimed.into_inner().expect("lock");
        let all = claimed.len();
        claimed.sort_unstable();
        claimed.dedup();
        assert_eq!(
            (all, claimed.len()),
            (30, 30),
            "each queued run claimed once"
        );
        assert!(daemons[0].queued_tasks().expect("queued").is_empty());
    }
}
