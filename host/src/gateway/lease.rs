//! Budget leases: each process that serves a workspace holds a slice of the
//! workspace's remaining budget, leased from a row of
//! `gateway_budget_leases` (workspace, owner, tokens, cost_usd, deadline),
//! and reserves calls against that slice in memory.
//!
//! The invariant, for every window (UTC day, UTC month) and limit:
//! `usage in the window + Σ every live lease ≤ limit`. It holds because
//! - a lease grows only in a `BEGIN IMMEDIATE` transaction that checks it
//!   (so processes serialise);
//! - a process reserves only within its own lease (in memory: in flight plus
//!   answered-but-not-yet-written ≤ leased);
//! - the background writer moves what a call spent from the lease row to
//!   `gateway_usage` in one transaction.
//!
//! A lease counts against both windows, whatever day it was taken. Its owner
//! renews it every tick (half a second) and gives back what an idle slice
//! holds (all of it, row included, when nothing is in flight); a lease
//! whose deadline passed (its process died) is deleted by the next process
//! that leases, so a crashed process's slice is free again after
//! [`LEASE_TTL_MS`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::args;
use crate::db::{Conn, Db, DbError, Dialect};

use super::writer::{Hook, UsageRecord};

/// A lease not renewed for this long is void (its process died).
pub const LEASE_TTL_MS: i64 = 30_000;
/// A slice is used in memory only while its lease has at least this long to
/// run; otherwise the request renews it first (the writer thread is stuck).
const LEASE_MARGIN_MS: i64 = 20_000;
/// A slice grows by at most this many times the call's estimate beyond it.
const MAX_EXTRA_CALLS: f64 = 63.0;
/// ... and by at most this share of the room left.
const EXTRA_SHARE: f64 = 0.25;

pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS gateway_budget_leases (
        workspace TEXT NOT NULL,
        owner TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        cost_usd REAL NOT NULL,
        deadline_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, owner)
    );";

/// Creates `gateway_spend_by_day`, what `gateway_usage` holds summed by
/// workspace and UTC day, kept by a trigger on every insert (whichever
/// process or version inserts), so checking a window reads at most 31 rows
/// instead of every call of the month. A database that had usage before
/// the table existed is summed into it in the same transaction that adds
/// the trigger (the caller's), so no row is counted twice or missed.
pub fn ensure_spend_by_day(tx: &mut dyn Conn) -> Result<(), DbError> {
    let dialect = tx.dialect();
    let exists = match dialect {
        Dialect::Sqlite => {
            "SELECT EXISTS (SELECT 1 FROM sqlite_master
                            WHERE type = 'trigger' AND name = 'gateway_usage_spend_by_day')"
        }
        Dialect::Postgres => {
            "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'gateway_usage_spend_by_day')"
        }
    };
    if tx.query_one(exists, args![])?.get::<bool>(0)? {
        return Ok(());
    }
    tx.schema(
        "CREATE TABLE IF NOT EXISTS gateway_spend_by_day (
            workspace TEXT NOT NULL,
            day TEXT NOT NULL,
            cost_usd REAL NOT NULL,
            tokens INTEGER NOT NULL,
            PRIMARY KEY (workspace, day)
        ) WITHOUT ROWID;
        DELETE FROM gateway_spend_by_day;
        INSERT INTO gateway_spend_by_day (workspace, day, cost_usd, tokens)
            SELECT workspace, day, COALESCE(SUM(cost_usd), 0.0),
                   COALESCE(SUM(prompt_tokens + completion_tokens), 0)
            FROM gateway_usage GROUP BY workspace, day;",
    )?;
    // The same trigger in each engine's words.
    match dialect {
        Dialect::Sqlite => tx.schema(
            "CREATE TRIGGER gateway_usage_spend_by_day AFTER INSERT ON gateway_usage
            BEGIN
                INSERT INTO gateway_spend_by_day (workspace, day, cost_usd, tokens)
                VALUES (NEW.workspace, NEW.day, COALESCE(NEW.cost_usd, 0.0),
                        NEW.prompt_tokens + NEW.completion_tokens)
                ON CONFLICT (workspace, day) DO UPDATE SET
                    cost_usd = cost_usd + excluded.cost_usd,
                    tokens = tokens + excluded.tokens;
            END;",
        ),
        Dialect::Postgres => tx.schema(
            "CREATE OR REPLACE FUNCTION gateway_usage_spend_by_day() RETURNS trigger
            LANGUAGE plpgsql AS $body$
            BEGIN
                INSERT INTO gateway_spend_by_day (workspace, day, cost_usd, tokens)
                VALUES (NEW.workspace, NEW.day, COALESCE(NEW.cost_usd, 0.0),
                        NEW.prompt_tokens + NEW.completion_tokens)
                ON CONFLICT (workspace, day) DO UPDATE SET
                    cost_usd = gateway_spend_by_day.cost_usd + excluded.cost_usd,
                    tokens = gateway_spend_by_day.tokens + excluded.tokens;
                RETURN NEW;
            END
            $body$;
            CREATE TRIGGER gateway_usage_spend_by_day AFTER INSERT ON gateway_usage
            FOR EACH ROW EXECUTE FUNCTION gateway_usage_spend_by_day();",
        ),
    }
}

/// One workspace's slice in this process.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Slice {
    /// Leased (as the lease row says once pending writes are applied).
    pub tokens: i64,
    pub usd: f64,
    /// Reserved by calls in flight plus spent by calls not yet written.
    pub used_tokens: i64,
    pub used_usd: f64,
    pub deadline_ms: i64,
    /// Reserved since the last tick (an idle slice gives back its room).
    pub busy: bool,
}

impl Slice {
    pub fn room_tokens(&self) -> i64 {
        self.tokens - self.used_tokens
    }

    pub fn room_usd(&self) -> f64 {
        self.usd - self.used_usd
    }
}

/// Every slice of this process, by workspace.
pub struct Slices {
    owner: String,
    clock: Arc<dyn Fn() -> i64 + Send + Sync>,
    by_workspace: RwLock<HashMap<String, Arc<Mutex<Slice>>>>,
}

pub fn lock(slice: &Mutex<Slice>) -> MutexGuard<'_, Slice> {
    // Every update of a slice is a few field writes with no panics between
    // them; a poisoned lock still holds consistent numbers.
    slice
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Slices {
    pub fn new(owner: String, clock: Arc<dyn Fn() -> i64 + Send + Sync>) -> Self {
        Self {
            owner,
            clock,
            by_workspace: RwLock::new(HashMap::new()),
        }
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn now(&self) -> i64 {
        (self.clock)()
    }

    pub fn get(&self, workspace: &str) -> Arc<Mutex<Slice>> {
        if let Some(slice) = self
            .by_workspace
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(workspace)
        {
            return slice.clone();
        }
        self.by_workspace
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(workspace.to_owned())
            .or_default()
            .clone()
    }

    fn all(&self) -> Vec<(String, Arc<Mutex<Slice>>)> {
        self.by_workspace
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Whether `slice` may be used without touching the database.
    pub fn fresh(&self, slice: &Slice) -> bool {
        self.now() < slice.deadline_ms - LEASE_MARGIN_MS
    }

    /// Gives every lease of this process back (normal shutdown).
    pub fn release_all(&self, db: &Db) {
        if let Err(e) = db.run(|conn| {
            conn.execute(
                "DELETE FROM gateway_budget_leases WHERE owner = ?1",
                args![&self.owner],
            )
        }) {
            tracing::warn!("cannot give back the budget leases (they expire in 30 s): {e}");
        }
    }
}

/// What the windows of a workspace hold in the database, for one lease
/// decision: spent (from `gateway_spend_by_day`), and leased or reserved
/// by others.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    pub day_usd: f64,
    pub day_tokens: f64,
    pub month_usd: f64,
    pub month_tokens: f64,
    /// Other owners' leases, plus live rows of `gateway_reservations`
    /// (written by pincer versions before leases).
    pub others_usd: f64,
    pub others_tokens: f64,
}

/// Deletes the leases past their deadline at `now` (their processes died).
pub fn drop_void(conn: &mut dyn Conn, now: i64) -> Result<(), DbError> {
    conn.execute(
        "DELETE FROM gateway_budget_leases WHERE deadline_ms <= ?1",
        args![now],
    )
    .map(drop)
}

/// Reads [`Held`] for `workspace` at `now` (void leases, past their
/// deadline, do not count). Reads only: a reader never waits for the write
/// lock.
pub fn held(conn: &mut dyn Conn, workspace: &str, owner: &str, now: i64) -> Result<Held, DbError> {
    let day = super::budget::utc_day(now);
    let month = &day[..7];
    let (month_first, month_last) = (format!("{month}-01"), format!("{month}-31"));
    let mut totals = |sql: &str, args: &[crate::db::Value]| -> Result<(f64, f64), DbError> {
        let row = conn.query_one(sql, args)?;
        Ok((row.get(0)?, row.get(1)?))
    };
    const WINDOW: &str = "SELECT CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION),
                                 CAST(COALESCE(SUM(tokens), 0) AS DOUBLE PRECISION)
                          FROM gateway_spend_by_day WHERE workspace = ?1 AND day BETWEEN ?2 AND ?3";
    let (day_usd, day_tokens) = totals(WINDOW, args![workspace, day.as_str(), day.as_str()])?;
    let (month_usd, month_tokens) = totals(WINDOW, args![workspace, month_first, month_last])?;
    let (lease_usd, lease_tokens) = totals(
        "SELECT CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION),
                CAST(COALESCE(SUM(tokens), 0) AS DOUBLE PRECISION)
         FROM gateway_budget_leases WHERE workspace = ?1 AND owner != ?2 AND deadline_ms > ?3",
        args![workspace, owner, now],
    )?;
    let legacy = totals(
        "SELECT CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION),
                CAST(COALESCE(SUM(tokens), 0) AS DOUBLE PRECISION)
         FROM gateway_reservations WHERE workspace = ?1 AND created_ms > ?2",
        args![workspace, now - super::budget::RESERVATION_TTL_MS],
    )?;
    Ok(Held {
        day_usd,
        day_tokens,
        month_usd,
        month_tokens,
        others_usd: lease_usd + legacy.0,
        others_tokens: lease_tokens + legacy.1,
    })
}

/// This owner's lease row of `workspace` (tokens, USD), if it has one.
pub fn mine(
    conn: &mut dyn Conn,
    workspace: &str,
    owner: &str,
) -> Result<Option<(i64, f64)>, DbError> {
    conn.query_opt(
        "SELECT tokens, cost_usd FROM gateway_budget_leases WHERE workspace = ?1 AND owner = ?2",
        args![workspace, owner],
    )?
    .map(|r| Ok((r.get(0)?, r.get(1)?)))
    .transpose()
}

/// Adds (`tokens`, `usd`) to this owner's lease of `workspace` and sets its
/// deadline; `mine` (the slice's lease before the change) re-creates a row
/// that another process deleted as void.
pub fn grow(
    conn: &mut dyn Conn,
    workspace: &str,
    owner: &str,
    mine: (i64, f64),
    add: (i64, f64),
    deadline_ms: i64,
) -> Result<(), DbError> {
    let changed = conn.execute(
        "UPDATE gateway_budget_leases
         SET tokens = tokens + ?3, cost_usd = cost_usd + ?4, deadline_ms = ?5
         WHERE workspace = ?1 AND owner = ?2",
        args![workspace, owner, add.0, add.1, deadline_ms],
    )?;
    if changed == 0 {
        if mine != (0, 0.0) {
            tracing::warn!(
                workspace,
                "this process's budget lease had expired (the process stalled for 30 s or more); taken again"
            );
        }
        conn.execute(
            "INSERT INTO gateway_budget_leases (workspace, owner, tokens, cost_usd, deadline_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            args![
                workspace,
                owner,
                mine.0 + add.0,
                mine.1 + add.1,
                deadline_ms
            ],
        )?;
    }
    Ok(())
}

/// How much to add to a slice that lacks `need` for a call estimated at
/// `estimate`, given `room` (the least room over the limits, in units of
/// the call's estimate, after `need`): `need` plus a whole number of
/// further estimates, so equal calls never strand a fraction of a call in
/// one process's slice.
pub fn extra_calls(room_in_calls: f64) -> f64 {
    if !room_in_calls.is_finite() || room_in_calls <= 0.0 {
        return 0.0;
    }
    (room_in_calls * EXTRA_SHARE).floor().min(MAX_EXTRA_CALLS)
}

/// The writer's side: spent amounts leave the lease in the batch's
/// transaction and the slice after the commit; leases are renewed, and
/// idle slices give their room back, on every tick.
pub struct LeaseHook {
    pub slices: Arc<Slices>,
}

impl Hook for LeaseHook {
    fn in_batch(&self, tx: &mut dyn Conn, usage: &[&UsageRecord]) -> Result<(), DbError> {
        for (workspace, (tokens, usd)) in sums(usage) {
            tx.execute(
                "UPDATE gateway_budget_leases SET tokens = tokens - ?3, cost_usd = cost_usd - ?4
                 WHERE workspace = ?1 AND owner = ?2",
                args![workspace, self.slices.owner(), tokens, usd],
            )?;
        }
        Ok(())
    }

    fn committed(&self, usage: &[&UsageRecord]) {
        for (workspace, (tokens, usd)) in sums(usage) {
            let slice = self.slices.get(workspace);
            let mut slice = lock(&slice);
            slice.tokens -= tokens;
            slice.usd -= usd;
            slice.used_tokens -= tokens;
            slice.used_usd -= usd;
        }
    }

    fn tick(&self, db: &Db) {
        let now = self.slices.now();
        for (workspace, slice) in self.slices.all() {
            let mut slice = lock(&slice);
            if slice.deadline_ms == 0 {
                continue;
            }
            if !slice.busy && slice.used_tokens == 0 && slice.used_usd.abs() < 1e-12 {
                // Idle with nothing in flight or unwritten: give it all back.
                match db.run(|conn| {
                    conn.execute(
                        "DELETE FROM gateway_budget_leases WHERE workspace = ?1 AND owner = ?2",
                        args![workspace.as_str(), self.slices.owner()],
                    )
                }) {
                    Ok(_) => *slice = Slice::default(),
                    Err(e) => tracing::warn!(workspace, "cannot give back a budget lease: {e}"),
                }
                continue;
            }
            // Idle: give back the room; renew what is used.
            let give = if slice.busy {
                (0, 0.0)
            } else {
                (slice.room_tokens().max(0), slice.room_usd().max(0.0))
            };
            let mine = (slice.tokens, slice.usd);
            let result = db.transaction(|tx| {
                grow(
                    tx,
                    &workspace,
                    self.slices.owner(),
                    mine,
                    (-give.0, -give.1),
                    now + LEASE_TTL_MS,
                )
            });
            match result {
                Ok(()) => {
                    slice.tokens -= give.0;
                    slice.usd -= give.1;
                    slice.deadline_ms = now + LEASE_TTL_MS;
                    slice.busy = false;
                }
                Err(e) => tracing::warn!(workspace, "cannot renew a budget lease: {e}"),
            }
        }
    }
}

/// Leased amounts of `usage`, summed by workspace.
fn sums<'a>(usage: &[&'a UsageRecord]) -> HashMap<&'a str, (i64, f64)> {
    let mut sums: HashMap<&str, (i64, f64)> = HashMap::new();
    for u in usage {
        if let Some((tokens, usd)) = u.leased {
            let sum = sums.entry(u.workspace.as_str()).or_default();
            sum.0 += tokens;
            sum.1 += usd;
        }
    }
    sums
}
