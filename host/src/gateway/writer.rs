//! The gateway's background writer: usage rows and audit events of answered
//! calls are queued by the request path and written by one thread in
//! batched transactions (group commit), so a request never waits for a
//! SQLite write.
//!
//! - Every pass takes whatever is queued (at most [`MAX_BATCH`] records)
//!   and commits it in one transaction; with nothing queued the thread
//!   sleeps. Woken by a record, it first lets [`GROUP_WINDOW`] pass (unless a
//!   whole batch is queued already), so under load one commit carries many
//!   calls: each commit costs WAL writes and a wake-up, and one per call was
//!   most of the gateway's kernel time. A record is written within about
//!   one window and one commit of being queued.
//! - Back-pressure: [`Writer::room`] waits while [`QUEUE_CAPACITY`] or more
//!   records are queued; the gateway awaits it before admitting a call.
//! - [`Writer::flush`] waits until everything queued so far is committed;
//!   dropping the writer flushes and stops the thread.
//! - A `kill -9` loses what is queued and not yet committed: at most
//!   [`QUEUE_CAPACITY`] plus the calls already admitted (docs/gateway.md
//!   states the bound; `tests/e2e/budget.rs` measures it).
//!
//! Each batch also runs the hook given to [`Writer::start`] inside the same
//! transaction (the budget leases move what was spent from the lease to the
//! usage table there), and after the commit.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::args;
use crate::db::{Conn, Db, DbError};

/// Records queued before admission waits ([`Writer::room`]).
pub const QUEUE_CAPACITY: usize = 1024;
/// Records written in one transaction at most.
pub const MAX_BATCH: usize = 1024;
/// How long a pass waits for more records before it commits. A commit
/// rewrites the same few pages (the tables' last leaves and their indexes)
/// however many rows it carries, so fewer, fuller commits cost less: at
/// 1000 calls a second, 50 ms is 100 calls (200 records) a commit, well
/// inside [`QUEUE_CAPACITY`], so the `kill -9` bound does not change.
pub const GROUP_WINDOW: Duration = Duration::from_millis(50);
/// How often the hook's `tick` runs when nothing is queued.
const TICK: Duration = Duration::from_millis(500);
/// Attempts at committing one batch before it is dropped (logged).
const ATTEMPTS: u32 = 5;

/// One usage row of `gateway_usage`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRecord {
    pub workspace: String,
    pub ts_ms: i64,
    pub day: String,
    pub model: String,
    pub deployment: String,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: Option<f64>,
    pub cached: bool,
    /// What this call takes out of the workspace's budget lease (tokens,
    /// USD), or `None` for a workspace without limits.
    pub leased: Option<(i64, f64)>,
}

/// One event of `audit_events`.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub ts_ms: i64,
    pub actor: String,
    pub workspace: Option<String>,
    pub kind: String,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Usage(UsageRecord),
    Audit(AuditRecord),
}

/// What the writer calls besides writing records.
pub trait Hook: Send + Sync + 'static {
    /// Inside the batch's transaction, for its usage records (run again
    /// if the transaction is).
    fn in_batch(&self, tx: &mut dyn Conn, usage: &[&UsageRecord]) -> Result<(), DbError>;
    /// After the batch's transaction committed.
    fn committed(&self, usage: &[&UsageRecord]);
    /// About every [`TICK`], on the writer's database handle (lease renewal).
    fn tick(&self, db: &Db);
}

#[derive(Default)]
struct Queue {
    records: Vec<Record>,
    /// Records ever queued, and ever written (or dropped after failing).
    queued: u64,
    done: u64,
    stop: bool,
    /// The writer thread waits for work: only then does a push wake it (a
    /// wake is a syscall, and the writer mostly sleeps out its group
    /// window or writes, and takes what is queued after either).
    idle: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer thread.
    work: Condvar,
    /// Wakes [`Writer::flush`] callers.
    written: Condvar,
    /// Wakes [`Writer::room`] callers.
    room: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves the queue consistent (it
        // only pushes or takes whole records), so poisoning is ignored.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub struct Writer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    /// Starts the thread, writing through `db` (a handle of its own).
    pub fn start(db: Db, hook: Arc<dyn Hook>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            written: Condvar::new(),
            room: tokio::sync::Notify::new(),
        });
        let thread = std::thread::Builder::new()
            .name("gateway-writer".into())
            .spawn({
                let shared = shared.clone();
                move || run(&db, &shared, &*hook)
            })?;
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `record`; never waits (admission waits in [`Self::room`]).
    pub fn push(&self, record: Record) {
        let mut queue = self.shared.lock();
        queue.records.push(record);
        queue.queued += 1;
        let idle = queue.idle;
        drop(queue);
        if idle {
            self.shared.work.notify_one();
        }
    }

    /// Records queued and not yet written.
    pub fn backlog(&self) -> usize {
        self.shared.lock().records.len()
    }

    /// Waits while the writer is behind ([`QUEUE_CAPACITY`] records queued).
    pub async fn room(&self) {
        loop {
            let notified = self.shared.room.notified();
            if self.backlog() < QUEUE_CAPACITY {
                return;
            }
            notified.await;
        }
    }

    /// Waits until every record queued before this call is written.
    pub fn flush(&self) {
        let mut queue = self.shared.lock();
        let target = queue.queued;
        while queue.done < target && !queue.stop {
            queue = self
                .shared
                .written
                .wait(queue)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Writes what is queued and stops the thread.
    pub fn stop(&self) {
        self.flush();
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the gateway writer thread panicked");
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(db: &Db, shared: &Shared, hook: &dyn Hook) {
    let mut ticked = std::time::Instant::now();
    loop {
        if ticked.elapsed() >= TICK {
            hook.tick(db);
            ticked = std::time::Instant::now();
        }
        let batch = {
            let mut queue = shared.lock();
            if queue.records.is_empty() && !queue.stop {
                queue.idle = true;
                let (mut q, _) = shared
                    .work
                    .wait_timeout(queue, TICK)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                q.idle = false;
                queue = q;
            }
            if queue.records.is_empty() {
                if queue.stop {
                    return;
                }
                continue;
            }
            if queue.records.len() < MAX_BATCH && !queue.stop {
                drop(queue);
                std::thread::sleep(GROUP_WINDOW);
                queue = shared.lock();
            }
            let take = queue.records.len().min(MAX_BATCH);
            let rest = queue.records.split_off(take);
            std::mem::replace(&mut queue.records, rest)
        };
        shared.room.notify_waiters();
        write_batch(db, &batch, hook);
        let mut queue = shared.lock();
        queue.done += batch.len() as u64;
        drop(queue);
        shared.written.notify_all();
    }
}

fn write_batch(db: &Db, batch: &[Record], hook: &dyn Hook) {
    let usage: Vec<&UsageRecord> = batch
        .iter()
        .filter_map(|r| match r {
            Record::Usage(u) => Some(u),
            Record::Audit(_) => None,
        })
        .collect();
    for attempt in 1..=ATTEMPTS {
        match try_batch(db, batch, &usage, hook) {
            Ok(()) => {
                hook.committed(&usage);
                return;
            }
            Err(e) if attempt < ATTEMPTS => {
                tracing::warn!(attempt, "gateway writer: batch not written, retrying: {e}");
                std::thread::sleep(Duration::from_millis(50 * u64::from(attempt)));
            }
            Err(e) => {
                tracing::error!(
                    records = batch.len(),
                    "gateway writer: {e}; these usage and audit records are lost"
                );
                // What was reserved for them stays leased until the
                // lease is trimmed or expires: conservative.
            }
        }
    }
}

fn try_batch(
    db: &Db,
    batch: &[Record],
    usage: &[&UsageRecord],
    hook: &dyn Hook,
) -> Result<(), DbError> {
    db.transaction(|tx| {
        for record in batch {
            match record {
                Record::Usage(u) => tx.execute(
                    "INSERT INTO gateway_usage (workspace, ts_ms, day, model, deployment,
                         prompt_tokens, completion_tokens, cost_usd, cached)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    args![
                        &u.workspace,
                        u.ts_ms,
                        &u.day,
                        &u.model,
                        &u.deployment,
                        u.prompt_tokens,
                        u.completion_tokens,
                        u.cost_usd,
                        u.cached
                    ],
                )?,
                Record::Audit(a) => tx.execute(
                    "INSERT INTO audit_events (timestamp_ms, actor, workspace, kind, detail)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    args![a.ts_ms, &a.actor, &a.workspace, &a.kind, &a.detail],
                )?,
            };
        }
        hook.in_batch(tx, usage)
    })
}
