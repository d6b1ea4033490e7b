//! Scheduled tasks: `schedules.yaml` per workspace, and which runs are due.
//!
//! - [`file`]: the typed file and its checks (located errors);
//! - [`plan`]: due times, the daylight-saving rule, catch-up after an outage;
//! - [`store`]: runs and per-task state in `pincer.db`, claimed before they
//!   start;
//! - [`clock`]: where "now" comes from (tests move it);
//! - [`agent`]: tasks the agent schedules for itself (`schedule__*` tools).
//!
//! [`Scheduler`] is pure logic over the store: the daemon calls
//! [`Scheduler::due_now`] at [`Scheduler::next_wake`] (and at least once a
//! second, to see pauses and manual runs made by other processes), runs each
//! [`DueRun`] it gets (a skill call or an agent turn, within the task's
//! `timeout`), calls [`Store::start`] and then [`Store::finish`]. Running is
//! not done here.
//!
//! Rules of [`Scheduler::due_now`], per task:
//! 1. a task seen for the first time starts counting from now (nothing
//!    before it is caught up); a resumed task moves its cursor to now, so
//!    nothing missed while paused runs;
//! 2. the due times since the task's cursor (`last_due`) are computed from
//!    that cursor, never from the tick: the ones within [`Scheduler::grace`]
//!    of now are on time and due; older ones were missed (the daemon was
//!    down or stalled) and follow `catch_up` ([`plan::due_between`]);
//! 3. each due time is a row claimed once (`UNIQUE(workspace, task, due)`):
//!    a restart or reload recomputes the same due times and finds them taken;
//! 4. a due time that finds the task's previous run still claimed or running
//!    is recorded `skipped` (`overlap: skip`) or `queued` (`overlap: queue`);
//!    the extra runs of a `catch_up: all` are always queued, so runs of one
//!    task never overlap; a queued run is handed out when none is active;
//! 5. when a scheduler starts, runs left claimed or running by another owner
//!    (a daemon that died) are marked `interrupted`, and so is any run whose
//!    lease (`timeout` + [`LEASE_MARGIN`]) ran out; with
//!    `rerun_interrupted: true` such a run (from the start only) is claimed
//!    again once, as a new attempt of the same due time;
//! 6. an agent task ([`agent::ID_PREFIX`]) never queues: a due time that
//!    finds its previous run going, or that comes less than
//!    [`agent::MIN_START_GAP`] after the latest scheduled start of that id
//!    (also one from before a cancel and re-create), is recorded `skipped`.

pub mod agent;
pub mod clock;
pub mod discover;
pub mod file;
pub mod plan;
pub mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use clock::{Clock, ManualClock, SystemClock};
pub use file::{Action, Asking, CatchUp, Checks, Delivery, Overlap, Task, Trigger};
pub use store::{Outcome, RunRecord, RunStatus, Store, StoreError};

use crate::config::ConfigError;

/// Added to a task's `timeout` for the lease of its claim.
pub const LEASE_MARGIN: Duration = Duration::from_secs(60);

/// Default of [`Scheduler::grace`].
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);

/// Errors of the scheduler.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// A `schedules.yaml` problem (located).
    #[error(transparent)]
    File(#[from] ConfigError),
    /// The database failed.
    #[error("schedule store: {0}")]
    Store(#[from] StoreError),
}

/// A run to start now: claimed in the store for the scheduler's owner.
#[derive(Debug, Clone)]
pub struct DueRun {
    /// The row in `schedule_runs` (for [`Store::start`] / [`Store::finish`]).
    pub run_id: i64,
    pub workspace: String,
    pub task: Arc<Task>,
    /// The due time this run is for.
    pub due: DateTime<Utc>,
    /// 1 for a first run, more for a rerun of an interrupted one.
    pub attempt: i64,
}

/// A loaded task and what the scheduler keeps of it in memory, so a tick
/// touches the database only for tasks that are due (or changed outside).
#[derive(Debug)]
struct Entry {
    task: Arc<Task>,
    /// The first due time after the task's cursor (`last_due`); `None` when
    /// it has none left (a past `at:`).
    next: Option<DateTime<Utc>>,
    paused: bool,
}

/// Decides which runs are due, over the store.
pub struct Scheduler {
    store: Store,
    clock: Arc<dyn Clock>,
    owner: String,
    /// Which workspaces' runs this daemon claims, and who else is alive.
    cluster: Arc<dyn crate::cluster::Membership>,
    workspaces: BTreeMap<String, Vec<Entry>>,
    grace: Duration,
    /// Runs interrupted when this scheduler started, rerun if their task
    /// says `rerun_interrupted`.
    interrupted: Mutex<Vec<RunRecord>>,
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn from_ms(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn whole_seconds(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

fn ms_of(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl Scheduler {
    /// A scheduler claiming runs as `owner` (unique per daemon process, e.g.
    /// a UUID), alone on its store: runs left claimed or running by other
    /// owners are marked interrupted.
    ///
    /// # Errors
    /// Database errors.
    pub fn new(
        store: Store,
        clock: Arc<dyn Clock>,
        owner: impl Into<String>,
    ) -> Result<Scheduler, ScheduleError> {
        Self::in_cluster(store, clock, Arc::new(crate::cluster::Solo(owner.into())))
    }

    /// A scheduler claiming runs as `cluster`'s daemon, for the workspaces
    /// it holds; runs of daemons no longer alive are marked interrupted.
    ///
    /// # Errors
    /// Database errors.
    pub fn in_cluster(
        store: Store,
        clock: Arc<dyn Clock>,
        cluster: Arc<dyn crate::cluster::Membership>,
    ) -> Result<Scheduler, ScheduleError> {
        let owner = cluster.id().to_owned();
        let interrupted = store.interrupt_abandoned(&cluster.alive(), ms(clock.now()))?;
        for run in &interrupted {
            tracing::warn!(
                workspace = %run.workspace,
                task = %run.task,
                due_ms = run.due_ms,
                "scheduled run interrupted by a restart"
            );
        }
        Ok(Scheduler {
            store,
            clock,
            owner,
            cluster,
            workspaces: BTreeMap::new(),
            grace: DEFAULT_GRACE,
            interrupted: Mutex::new(interrupted),
        })
    }

    /// How late a due time may be seen and still count as on time rather
    /// than missed (default [`DEFAULT_GRACE`]).
    pub fn grace(&self) -> Duration {
        self.grace
    }

    pub fn set_grace(&mut self, grace: Duration) {
        self.grace = grace;
    }

    /// Sets (or replaces, on reload) the tasks of a workspace. A task seen
    /// for the first time starts counting from now (rule 1).
    ///
    /// # Errors
    /// Database errors.
    pub fn set_tasks(&mut self, workspace: &str, tasks: Vec<Task>) -> Result<(), ScheduleError> {
        let now = whole_seconds(self.clock.now());
        let states = self.store.states(workspace)?;
        let unseen: Vec<&str> = tasks
            .iter()
            .filter(|t| states.get(&t.id).is_none_or(|s| s.last_due_ms.is_none()))
            .map(|t| t.id.as_str())
            .collect();
        self.store.init_cursors(workspace, &unseen, ms(now))?;
        let entries = tasks
            .into_iter()
            .map(|task| {
                let state = states.get(&task.id);
                let cursor = state.and_then(|s| s.last_due_ms).map_or(now, from_ms);
                Entry {
                    next: plan::next_after(&task, cursor),
                    paused: state.is_some_and(|s| s.paused),
                    task: Arc::new(task),
                }
            })
            .collect();
        self.workspaces.insert(workspace.to_owned(), entries);
        Ok(())
    }

    /// Forgets a workspace's tasks (its rows stay).
    pub fn remove_workspace(&mut self, workspace: &str) {
        self.workspaces.remove(workspace);
    }

    /// The task `id` of `workspace`, if loaded.
    pub fn task(&self, workspace: &str, id: &str) -> Option<&Arc<Task>> {
        self.workspaces
            .get(workspace)?
            .iter()
            .find(|e| e.task.id == id)
            .map(|e| &e.task)
    }

    /// How many tasks are loaded, over all workspaces.
    pub fn task_count(&self) -> usize {
        self.workspaces.values().map(Vec::len).sum()
    }

    /// The earliest due time of any task that is not paused: the daemon
    /// sleeps until then (or until it polls for changes made outside, such
    /// as `pincer schedule pause` or `run`).
    pub fn next_wake(&self) -> Option<DateTime<Utc>> {
        self.workspaces
            .values()
            .flatten()
            .filter(|e| !e.paused)
            .filter_map(|e| e.next)
            .min()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Pauses a task (kept across restarts).
    ///
    /// # Errors
    /// Database errors.
    pub fn pause(&mut self, workspace: &str, task: &str) -> Result<(), ScheduleError> {
        self.store.set_paused(workspace, task, true)?;
        if let Some(entry) = self.entry_mut(workspace, task) {
            entry.paused = true;
        }
        Ok(())
    }

    /// Resumes a task; what it missed while paused does not run.
    ///
    /// # Errors
    /// Database errors.
    pub fn resume(&mut self, workspace: &str, task: &str) -> Result<(), ScheduleError> {
        let now = whole_seconds(self.clock.now());
        self.store.resume(workspace, task, ms(now))?;
        if let Some(entry) = self.entry_mut(workspace, task) {
            entry.paused = false;
            entry.next = plan::next_after(&entry.task, now);
        }
        Ok(())
    }

    fn entry_mut(&mut self, workspace: &str, task: &str) -> Option<&mut Entry> {
        self.workspaces
            .get_mut(workspace)?
            .iter_mut()
            .find(|e| e.task.id == task)
    }

    fn lease_until(&self, task: &Task, now: DateTime<Utc>) -> i64 {
        ms(now + chrono_duration(task.timeout.saturating_add(LEASE_MARGIN)))
    }

    /// The runs to start now, each claimed once (see the module docs).
    ///
    /// Cheap when nothing is due: three indexed queries (expired leases,
    /// paused tasks, queued runs) whatever the number of tasks; only due
    /// tasks are looked up one by one.
    ///
    /// # Errors
    /// Database errors.
    pub fn due_now(&mut self) -> Result<Vec<DueRun>, ScheduleError> {
        let now = whole_seconds(self.clock.now());
        let now_ms = ms(now);
        // leases that ran out (a run that outlived its timeout), and runs
        // of a daemon that died: those are rerun here if their task says so
        let abandoned = self
            .store
            .interrupt_abandoned(&self.cluster.alive(), now_ms)?;
        self.interrupted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(
                abandoned
                    .into_iter()
                    .filter(|run| run.claimed_by.as_deref() != Some(self.owner.as_str())),
            );
        let paused = self.store.paused_tasks()?;
        let queued = self.store.queued_tasks()?;
        let rerun: BTreeSet<(String, String)> = self
            .interrupted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|r| (r.workspace.clone(), r.task.clone()))
            .collect();
        let mut workspaces = std::mem::take(&mut self.workspaces);
        let mut out = Vec::new();
        let mut result = Ok(());
        'all: for (workspace, entries) in &mut workspaces {
            if !self.cluster.holds(workspace) {
                // Another daemon runs it; its due times are claimed there.
                continue;
            }
            for entry in entries.iter_mut() {
                let key = (workspace.clone(), entry.task.id.clone());
                if paused.contains(&key) {
                    entry.paused = true;
                    continue;
                }
                if entry.paused {
                    // resumed from outside (`pincer schedule resume`):
                    // nothing missed while paused runs
                    entry.paused = false;
                    if let Err(e) = self.store.set_last_due(workspace, &entry.task.id, now_ms) {
                        result = Err(e.into());
                        break 'all;
                    }
                    entry.next = plan::next_after(&entry.task, now);
                }
                let due = entry.next.is_some_and(|next| next <= now)
                    || queued.contains(&key)
                    || rerun.contains(&key);
                if !due {
                    continue;
                }
                if let Err(e) = self.due_task(workspace, &entry.task, now, &mut out) {
                    result = Err(e);
                    break 'all;
                }
                entry.next = plan::next_after(&entry.task, now);
            }
        }
        self.workspaces = workspaces;
        result?;
        out.sort_by_key(|run| run.due);
        Ok(out)
    }

    fn due_task(
        &self,
        workspace: &str,
        task: &Arc<Task>,
        now: DateTime<Utc>,
        out: &mut Vec<DueRun>,
    ) -> Result<(), ScheduleError> {
        let store = &self.store;
        let id = task.id.as_str();
        let now_ms = ms(now);
        let lease = self.lease_until(task, now);
        let run = |run_id, due_ms, attempt| DueRun {
            run_id,
            workspace: workspace.to_owned(),
            task: Arc::clone(task),
            due: from_ms(due_ms),
            attempt,
        };

        let mut active = store.active_run(workspace, id)?.is_some();

        // 5. reruns of runs interrupted at start
        {
            let mut pending = self
                .interrupted
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let mut keep = Vec::with_capacity(pending.len());
            for record in pending.drain(..) {
                if record.workspace != workspace || record.task != id {
                    keep.push(record);
                } else if task.rerun_interrupted
                    && !active
                    && store.reclaim_interrupted(record.id, &self.owner, lease)?
                {
                    out.push(run(record.id, record.due_ms, record.attempt + 1));
                    active = true;
                }
            }
            *pending = keep;
        }

        // 4. a queued run, once none is active
        if !active && let Some(record) = store.claim_queued(workspace, id, &self.owner, lease)? {
            out.push(run(record.id, record.due_ms, record.attempt));
            active = true;
        }

        // 1. first sight
        let Some(last_ms) = store.last_due(workspace, id)? else {
            store.set_last_due(workspace, id, now_ms)?;
            return Ok(());
        };
        let last = from_ms(last_ms);

        // 2. due times since the cursor: missed ones by catch_up, on-time ones
        let on_time_from = now - chrono_duration(self.grace);
        let mut dues = if on_time_from > last {
            plan::due_between(task, last, on_time_from, task.catch_up)
        } else {
            Vec::new()
        };
        dues.extend(plan::due_between(
            task,
            last.max(on_time_from),
            now,
            CatchUp::All,
        ));

        // 3. and 4. claim each once; an agent task's runs never queue and
        // start at most once every agent::MIN_START_GAP (6.)
        let agent_task = id.starts_with(agent::ID_PREFIX);
        let mut too_soon = agent_task
            && store
                .last_start_ms(workspace, id)?
                .is_some_and(|last| now_ms.saturating_sub(last) < ms_of(agent::MIN_START_GAP));
        let mut claimed_here = false;
        for due in dues {
            let (status, note) = if agent_task && (active || too_soon) {
                let note = if active {
                    "the previous run was still going"
                } else {
                    "an agent task starts at most once every 4m"
                };
                (RunStatus::Skipped, Some(note))
            } else if !active {
                (RunStatus::Claimed, None)
            } else if task.overlap == Overlap::Queue || claimed_here {
                (RunStatus::Queued, None)
            } else {
                (RunStatus::Skipped, Some("the previous run was still going"))
            };
            let claimed = store.claim(workspace, id, ms(due), status, &self.owner, lease, note)?;
            if let Some(run_id) = claimed
                && status == RunStatus::Claimed
            {
                out.push(run(run_id, ms(due), 1));
                active = true;
                claimed_here = true;
                too_soon = agent_task;
            }
        }
        store.set_last_due(workspace, id, now_ms)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
