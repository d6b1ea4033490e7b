//! Budgets: per-workspace limits on model spend, enforced **before** a call
//! is dispatched, and the usage ledger behind `pincer gateway usage`.
//!
//! A call goes through three steps:
//! 1. [`Ledger::reserve`] checks that this call's [`Estimate`] fits the
//!    workspace's [`Budget`] and records a reservation. It does so in
//!    memory, against this process's slice of the budget, leased from a
//!    database row ([`super::lease`]); only when the slice is too small or
//!    its lease must be renewed does it take a write transaction (`BEGIN
//!    IMMEDIATE`, so processes serving the same workspace serialise) that
//!    checks what is spent in the window plus every other process's lease
//!    plus this slice stays within each limit.
//! 2. The call is made.
//! 3. [`Ledger::settle`] replaces the reservation with the actual usage,
//!    queued for the background writer ([`super::writer`]), which writes it
//!    and takes it out of the lease in one batched transaction; or
//!    [`Ledger::release`] drops it when nothing was spent (the call failed).
//!    A [`Reservation`] dropped without either is released too (the request
//!    was cancelled), and the lease of a crashed process stops counting
//!    after [`LEASE_TTL_MS`] (30 s).
//!
//! Windows are the UTC day and the UTC calendar month. Token limits count
//! prompt plus completion tokens. Limits are inclusive: spending exactly the
//! limit is allowed.
//!
//! Estimates: the completion part uses the request's `max_tokens` /
//! `max_completion_tokens` (times `n`), or [`DEFAULT_MAX_COMPLETION_TOKENS`]
//! when the request sets neither; the prompt part is a deliberately generous
//! guess from the request text ([`estimate_prompt_tokens`]). The dispatcher
//! sends the reserved per-choice bound ([`completion_bound`]) upstream on
//! every HTTP request (each provider adapter puts it in the field that
//! provider honours: `gateway::llm::openai::upstream_body`,
//! `gateway::llm::anthropic::request_from_openai`), so a response cannot
//! use more completion tokens than were reserved.
//!
//! Models without a price: a workspace with a USD limit refuses them
//! ([`BudgetError::Unpriced`], telling the user to add `gateway.prices`)
//! instead of guessing; without a USD limit they are recorded with tokens
//! only.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::args;
use crate::db::{Db, DbError, Location};

use super::lease::{self, LEASE_TTL_MS, LeaseHook, Slice, Slices};
use super::writer::{AuditRecord, Record, UsageRecord, Writer};
use serde::Serialize;
use serde_json::{Value, json};

use super::cost::Price;
use crate::config::Budget;

/// Completion tokens reserved for a request that sets no `max_tokens`.
pub const DEFAULT_MAX_COMPLETION_TOKENS: u64 = 4096;
/// Rows of `gateway_reservations` (written by pincer before leases, and
/// still counted while such a process runs) older than this do not count.
pub const RESERVATION_TTL_MS: i64 = 10 * 60 * 1000;
/// Token counts are capped at this per call when stored (2^40), so sums
/// cannot overflow.
const MAX_STORED_TOKENS: u64 = 1 << 40;
/// Tolerance for comparing USD sums with limits.
const USD_EPSILON: f64 = 1e-9;
/// Tokens counted for an inline `data:` URL (an image or a file).
const DATA_URL_TOKENS: u64 = 1600;

/// What a call may use at most, as reserved before dispatch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub prompt_tokens: u64,
    pub max_completion_tokens: u64,
    /// `None` when the model has no price.
    pub cost_usd: Option<f64>,
}

impl Estimate {
    /// An estimate for `prompt_tokens` and at most `max_tokens` completion
    /// tokens ([`DEFAULT_MAX_COMPLETION_TOKENS`] if `None`), priced at
    /// `price`.
    pub fn new(prompt_tokens: u64, max_tokens: Option<u64>, price: Option<Price>) -> Self {
        let max_completion_tokens = max_tokens.unwrap_or(DEFAULT_MAX_COMPLETION_TOKENS);
        Estimate {
            prompt_tokens,
            max_completion_tokens,
            cost_usd: price.map(|p| p.cost(prompt_tokens, max_completion_tokens)),
        }
    }

    /// The estimate for an OpenAI chat completion or Anthropic messages
    /// request body: [`estimate_prompt_tokens`], and `max_completion_tokens`
    /// or `max_tokens` (default [`DEFAULT_MAX_COMPLETION_TOKENS`]) times `n`.
    pub fn for_request(request: &Value, price: Option<Price>) -> Self {
        let choices = request.get("n").and_then(Value::as_u64).unwrap_or(1).max(1);
        let max = completion_bound(request).saturating_mul(choices);
        Self::new(estimate_prompt_tokens(request), Some(max), price)
    }

    /// Prompt plus completion tokens.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens
            .saturating_add(self.max_completion_tokens)
    }
}

/// The request fields that bound completion tokens (OpenAI's current and
/// legacy names).
pub const COMPLETION_BOUND_FIELDS: [&str; 2] = ["max_completion_tokens", "max_tokens"];

/// The completion tokens one choice of `request` may use, as reserved: the
/// smaller of the client's `max_completion_tokens` and `max_tokens` (whole
/// numbers only), or [`DEFAULT_MAX_COMPLETION_TOKENS`] when it sets neither.
pub fn completion_bound(request: &Value) -> u64 {
    match request {
        Value::Object(body) => completion_bound_in(body),
        _ => DEFAULT_MAX_COMPLETION_TOKENS,
    }
}

/// [`completion_bound`] of a request body already taken apart.
pub fn completion_bound_in(body: &serde_json::Map<String, Value>) -> u64 {
    COMPLETION_BOUND_FIELDS
        .iter()
        .filter_map(|k| body.get(*k).and_then(Value::as_u64))
        .min()
        .unwrap_or(DEFAULT_MAX_COMPLETION_TOKENS)
}

/// A generous guess of a request's prompt tokens: one token per 4 ASCII
/// bytes and per non-ASCII character of every string in the body except
/// `model` and `user` (messages, system prompt, tool definitions), 4 per
/// array element or object for framing, and [`DATA_URL_TOKENS`] for each
/// inline `data:` URL (images, files), whatever its length.
pub fn estimate_prompt_tokens(request: &Value) -> u64 {
    fn walk(value: &Value) -> u64 {
        match value {
            Value::String(s) if s.starts_with("data:") && s.len() > 1024 => DATA_URL_TOKENS,
            Value::String(s) => {
                let (ascii, other) = s.chars().fold((0u64, 0u64), |(a, o), c| {
                    if c.is_ascii() { (a + 1, o) } else { (a, o + 1) }
                });
                ascii.div_ceil(4) + other
            }
            Value::Array(items) => items.iter().map(|v| 4 + walk(v)).sum(),
            Value::Object(map) => map.iter().map(|(k, v)| walk_key(k) + walk(v)).sum::<u64>(),
            Value::Null | Value::Bool(_) | Value::Number(_) => 1,
        }
    }
    fn walk_key(key: &str) -> u64 {
        (key.len() as u64).div_ceil(4)
    }
    match request {
        Value::Object(map) => map
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "model" | "user"))
            .map(|(_, v)| walk(v))
            .sum(),
        other => walk(other),
    }
}

/// What a call actually used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The limit a call would break.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    DailyUsd(f64),
    MonthlyUsd(f64),
    DailyTokens(u64),
    MonthlyTokens(u64),
}

impl Limit {
    /// The key under `workspaces.NAME.budget`.
    pub fn key(&self) -> &'static str {
        match self {
            Limit::DailyUsd(_) => "daily_usd",
            Limit::MonthlyUsd(_) => "monthly_usd",
            Limit::DailyTokens(_) => "daily_tokens",
            Limit::MonthlyTokens(_) => "monthly_tokens",
        }
    }

    fn is_usd(&self) -> bool {
        matches!(self, Limit::DailyUsd(_) | Limit::MonthlyUsd(_))
    }

    fn is_daily(&self) -> bool {
        matches!(self, Limit::DailyUsd(_) | Limit::DailyTokens(_))
    }

    /// `amount` in this limit's unit.
    fn amount(&self, amount: f64) -> String {
        if self.is_usd() {
            format!("${amount:.4}")
        } else {
            format!("{amount:.0} tokens")
        }
    }
}

/// `daily_usd 1.00`, `monthly_tokens 100000`.
impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::DailyUsd(v) | Limit::MonthlyUsd(v) => write!(f, "{} {v:.2}", self.key()),
            Limit::DailyTokens(v) | Limit::MonthlyTokens(v) => write!(f, "{} {v}", self.key()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum BudgetError {
    /// The call could go over `limit`: `spent` (spent plus reserved in the
    /// window) + `requested` (this call's estimate) > the limit.
    Exceeded {
        workspace: String,
        limit: Limit,
        spent: f64,
        requested: f64,
    },
    /// The workspace has a USD limit and the model has no price.
    Unpriced { workspace: String, model: String },
    /// The ledger could not be read or written; the call is refused.
    Storage(String),
}

impl fmt::Display for BudgetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BudgetError::Exceeded {
                workspace,
                limit,
                spent,
                requested,
            } => {
                let (window, reset) = if limit.is_daily() {
                    ("today", "the next UTC day")
                } else {
                    ("this month", "the next UTC month")
                };
                write!(
                    f,
                    "budget exceeded for workspace `{workspace}`: limit {limit}; {} spent or \
                     reserved {window} (UTC), and this call may use up to {}. Wait for {reset} \
                     or raise workspaces.{workspace}.budget.{}",
                    limit.amount(*spent),
                    limit.amount(*requested),
                    limit.key()
                )
            }
            BudgetError::Unpriced { workspace, model } => write!(
                f,
                "model `{model}` has no known price and workspace `{workspace}` has a USD \
                 budget, so the call is refused: add a price under gateway.prices, e.g. \
                 \"{model}\": {{input_per_1m: 1.00, output_per_1m: 2.00}} (USD per million \
                 tokens)"
            ),
            BudgetError::Storage(e) => write!(f, "budget ledger: {e}"),
        }
    }
}

impl std::error::Error for BudgetError {}

impl From<DbError> for BudgetError {
    fn from(e: DbError) -> Self {
        Self::Storage(e.to_string())
    }
}

impl BudgetError {
    /// HTTP status and OpenAI-style error body:
    /// `Exceeded` is 429 `budget_exceeded`; `Unpriced` is 400
    /// `model_price_unknown`; `Storage` is 503 `budget_unavailable` (details
    /// are for the log, not the client).
    pub fn to_openai_error(&self) -> (u16, Value) {
        let (status, kind, code, message) = match self {
            BudgetError::Exceeded { .. } => {
                (429, "budget_exceeded", "budget_exceeded", self.to_string())
            }
            BudgetError::Unpriced { .. } => (
                400,
                "invalid_request_error",
                "model_price_unknown",
                self.to_string(),
            ),
            BudgetError::Storage(_) => (
                503,
                "server_error",
                "budget_unavailable",
                "the budget ledger is unavailable, so the call was refused; see the pincer log"
                    .to_owned(),
            ),
        };
        (
            status,
            json!({"error": {"message": message, "type": kind, "code": code, "param": null}}),
        )
    }
}

/// A reservation made by [`Ledger::reserve`]. Settle or release it; if it
/// is dropped instead, it is released.
pub struct Reservation {
    /// Reserved in this process's slice of the workspace's budget (`None`
    /// for a workspace without limits): tokens, USD.
    held: Option<(i64, f64)>,
    workspace: String,
    model: String,
    estimate: Estimate,
    ledger: Arc<Ledger>,
}

impl Reservation {
    pub fn workspace(&self) -> &str {
        &self.workspace
    }

    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn estimate(&self) -> &Estimate {
        &self.estimate
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("held", &self.held)
            .field("workspace", &self.workspace)
            .field("model", &self.model)
            .field("estimate", &self.estimate)
            .finish_non_exhaustive()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            self.ledger.unhold(&self.workspace, held);
        }
    }
}

enum Prepared {
    Unlimited(Reservation),
    /// Tokens and USD the reservation wants from the lease.
    Limited(Reservation, (i64, f64)),
}

/// Takes `want` out of the room of `slice` for `reservation`.
fn hold(slice: &mut Slice, reservation: &mut Reservation, want: (i64, f64)) {
    slice.used_tokens += want.0;
    slice.used_usd += want.1;
    slice.busy = true;
    reservation.held = Some(want);
}

/// Usage of one workspace, day and model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UsageRow {
    pub workspace: String,
    /// UTC, `YYYY-MM-DD`.
    pub day: String,
    pub model: String,
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Sum over the priced calls.
    pub cost_usd: f64,
    pub cached_calls: u64,
    /// Calls of a model without a price (not in `cost_usd`).
    pub unpriced_calls: u64,
}

/// What counts against a workspace's limits right now.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Spend {
    pub day_usd: f64,
    pub day_tokens: u64,
    pub month_usd: f64,
    pub month_tokens: u64,
    /// Outstanding reservations (included in neither of the above).
    pub reserved_usd: f64,
    pub reserved_tokens: u64,
}

type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The budget ledger, in the host database: reservations against this
/// process's leased slices ([`super::lease`]), usage written by the
/// background writer ([`super::writer`]).
pub struct Ledger {
    /// For leasing and reading; the writer has its own handle.
    db: Db,
    slices: Arc<Slices>,
    writer: Writer,
}

impl Ledger {
    pub fn open(path: &Path) -> Result<Arc<Self>, BudgetError> {
        Self::open_at(&Location::from(path), crate::db::now_ms)
    }

    /// The ledger on the state at `at`, reading the time from `clock`.
    pub fn open_at(
        at: &Location,
        clock: impl Fn() -> i64 + Send + Sync + 'static,
    ) -> Result<Arc<Self>, BudgetError> {
        // The writer also writes `audit_events`: the audit log owns its schema.
        if let Err(e) = crate::audit::AuditLog::open_at(at) {
            return Err(BudgetError::Storage(e.to_string()));
        }
        let db = Db::open(at)?;
        db.transaction(|tx| {
            tx.schema(
                "CREATE TABLE IF NOT EXISTS gateway_usage (
                id INTEGER PRIMARY KEY,
                workspace TEXT NOT NULL,
                ts_ms INTEGER NOT NULL,
                day TEXT NOT NULL,
                model TEXT NOT NULL,
                deployment TEXT NOT NULL,
                prompt_tokens INTEGER NOT NULL,
                completion_tokens INTEGER NOT NULL,
                cost_usd REAL,
                cached INTEGER NOT NULL
            );
            CREATE INDEX IF NOT EXISTS gateway_usage_by_day ON gateway_usage (workspace, day);
            CREATE TABLE IF NOT EXISTS gateway_reservations (
                id INTEGER PRIMARY KEY,
                workspace TEXT NOT NULL,
                created_ms INTEGER NOT NULL,
                model TEXT NOT NULL,
                tokens INTEGER NOT NULL,
                cost_usd REAL
            );
            CREATE INDEX IF NOT EXISTS gateway_reservations_by_workspace
                ON gateway_reservations (workspace, created_ms);",
            )?;
            tx.schema(lease::SCHEMA)?;
            lease::ensure_spend_by_day(tx)
        })?;
        let clock: Clock = Arc::new(clock);
        let slices = Arc::new(Slices::new(owner_id(), clock));
        let writer = Writer::start(
            Db::open(at)?,
            Arc::new(LeaseHook {
                slices: slices.clone(),
            }),
        )
        .map_err(|e| BudgetError::Storage(format!("cannot start the usage writer: {e}")))?;
        Ok(Arc::new(Self { db, slices, writer }))
    }

    fn now(&self) -> i64 {
        self.slices.now()
    }

    /// Reserves `estimate` for a call of `model` by `workspace`, or says
    /// which limit it could break. A workspace without limits reserves
    /// nothing (and touches no storage); otherwise the reservation is made
    /// in memory, within this process's lease, and the database is touched
    /// only when the lease must grow or be renewed.
    ///
    /// # Errors
    /// [`BudgetError::Exceeded`], [`BudgetError::Unpriced`] (a USD limit and
    /// no `estimate.cost_usd`), [`BudgetError::Storage`].
    pub fn reserve(
        self: &Arc<Self>,
        workspace: &str,
        budget: &Budget,
        model: &str,
        estimate: Estimate,
    ) -> Result<Reservation, BudgetError> {
        let (mut reservation, want) = match self.prepare(workspace, budget, model, estimate)? {
            Prepared::Unlimited(reservation) => return Ok(reservation),
            Prepared::Limited(reservation, want) => (reservation, want),
        };
        let slice = self.slices.get(workspace);
        let mut held = lease::lock(&slice);
        if !self.has_room(&held, want) {
            self.grow(workspace, budget, &mut held, want)?;
        }
        hold(&mut held, &mut reservation, want);
        Ok(reservation)
    }

    /// [`Self::reserve`] for async code: in memory on the caller's thread
    /// when the lease has room, else on a blocking thread, so a runtime of
    /// one thread never waits on the database (a lease grows in a write
    /// transaction, which may wait on another process's).
    ///
    /// # Errors
    /// As [`Self::reserve`].
    pub async fn reserve_async(
        self: &Arc<Self>,
        workspace: &str,
        budget: Budget,
        model: &str,
        estimate: Estimate,
    ) -> Result<Reservation, BudgetError> {
        let (mut reservation, want) = match self.prepare(workspace, &budget, model, estimate)? {
            Prepared::Unlimited(reservation) => return Ok(reservation),
            Prepared::Limited(reservation, want) => (reservation, want),
        };
        {
            let slice = self.slices.get(workspace);
            let mut held = lease::lock(&slice);
            if self.has_room(&held, want) {
                hold(&mut held, &mut reservation, want);
                return Ok(reservation);
            }
        }
        let ledger = Arc::clone(self);
        let (workspace, model) = (workspace.to_owned(), model.to_owned());
        tokio::task::spawn_blocking(move || ledger.reserve(&workspace, &budget, &model, estimate))
            .await
            .map_err(|e| BudgetError::Storage(format!("the budget reservation stopped: {e}")))?
    }

    /// The reservation to fill and what it wants from the lease, or the
    /// finished reservation of a workspace without limits.
    fn prepare(
        self: &Arc<Self>,
        workspace: &str,
        budget: &Budget,
        model: &str,
        estimate: Estimate,
    ) -> Result<Prepared, BudgetError> {
        let estimate = Estimate {
            cost_usd: valid_cost(estimate.cost_usd),
            ..estimate
        };
        let reservation = Reservation {
            held: None,
            workspace: workspace.to_owned(),
            model: model.to_owned(),
            estimate,
            ledger: Arc::clone(self),
        };
        if budget.is_unlimited() {
            return Ok(Prepared::Unlimited(reservation));
        }
        if budget.has_usd_limit() && estimate.cost_usd.is_none() {
            return Err(BudgetError::Unpriced {
                workspace: workspace.to_owned(),
                model: model.to_owned(),
            });
        }
        let want = (to_i64(estimate.tokens()), estimate.cost_usd.unwrap_or(0.0));
        Ok(Prepared::Limited(reservation, want))
    }

    /// Whether `slice` can hold `want` without touching the database.
    fn has_room(&self, slice: &Slice, (tokens, usd): (i64, f64)) -> bool {
        slice.room_tokens() >= tokens
            && slice.room_usd() + USD_EPSILON >= usd
            && self.slices.fresh(slice)
    }

    /// Grows (and renews) this process's lease of `workspace` so `slice`
    /// has room for `want`, in one `BEGIN IMMEDIATE` transaction.
    fn grow(
        &self,
        workspace: &str,
        budget: &Budget,
        slice: &mut Slice,
        want: (i64, f64),
    ) -> Result<(), BudgetError> {
        let now = self.now();
        let need_tokens = (want.0 - slice.room_tokens()).max(0);
        let need_usd = (want.1 - slice.room_usd()).max(0.0);
        // The slice as it is now: a transaction that lost a conflict runs
        // again, so it only reads it, and the lease grows after the commit.
        let now_slice = *slice;
        let (add, deadline) = self.db.transaction(|tx| {
            let slice = &now_slice;
            lease::drop_void(tx, now)?;
            let held = lease::held(tx, workspace, self.slices.owner(), now)?;
            // The lease row as this transaction sees it: it differs from the
            // slice by what the writer committed and has not yet taken out of
            // the slice, which the usage table already holds.
            let (mine_tokens, mine_usd) = lease::mine(tx, workspace, self.slices.owner())?
                .unwrap_or((slice.tokens, slice.usd));
            let (written_tokens, written_usd) = (slice.tokens - mine_tokens, slice.usd - mine_usd);
            let leased_usd = held.others_usd + mine_usd;
            let leased_tokens = held.others_tokens + mine_tokens as f64;
            let in_use_usd = held.others_usd + slice.used_usd - written_usd;
            let in_use_tokens = held.others_tokens + (slice.used_tokens - written_tokens) as f64;
            // (limit, its value, spent in its window, requested, per call)
            let checks = [
                budget
                    .daily_usd
                    .map(|l| (Limit::DailyUsd(l), l, held.day_usd, leased_usd, in_use_usd)),
                budget.monthly_usd.map(|l| {
                    (
                        Limit::MonthlyUsd(l),
                        l,
                        held.month_usd,
                        leased_usd,
                        in_use_usd,
                    )
                }),
                budget.daily_tokens.map(|l| {
                    (
                        Limit::DailyTokens(l),
                        l as f64,
                        held.day_tokens,
                        leased_tokens,
                        in_use_tokens,
                    )
                }),
                budget.monthly_tokens.map(|l| {
                    (
                        Limit::MonthlyTokens(l),
                        l as f64,
                        held.month_tokens,
                        leased_tokens,
                        in_use_tokens,
                    )
                }),
            ];
            // The least room any limit leaves after this call, in calls like it.
            let mut room_in_calls = f64::INFINITY;
            for (limit, max, spent, leased, in_use) in checks.into_iter().flatten() {
                let (need, per_call, slack) = if limit.is_usd() {
                    (need_usd, want.1, USD_EPSILON)
                } else {
                    (need_tokens as f64, want.0 as f64, 0.0)
                };
                let room = max - spent - leased - need;
                if room + slack < 0.0 {
                    return Err(BudgetError::Exceeded {
                        workspace: workspace.to_owned(),
                        limit,
                        spent: spent + in_use,
                        requested: per_call,
                    });
                }
                if per_call > 0.0 {
                    room_in_calls = room_in_calls.min(room / per_call);
                }
            }
            let extra = lease::extra_calls(room_in_calls);
            let add = (
                need_tokens + (extra * want.0 as f64) as i64,
                need_usd + extra * want.1,
            );
            let deadline = now + LEASE_TTL_MS;
            lease::grow(
                tx,
                workspace,
                self.slices.owner(),
                (mine_tokens, mine_usd),
                add,
                deadline,
            )?;
            Ok((add, deadline))
        })?;
        slice.tokens += add.0;
        slice.usd += add.1;
        slice.deadline_ms = deadline;
        Ok(())
    }

    fn unhold(&self, workspace: &str, (tokens, usd): (i64, f64)) {
        let slice = self.slices.get(workspace);
        let mut slice = lease::lock(&slice);
        slice.used_tokens -= tokens;
        slice.used_usd -= usd;
    }

    /// Replaces `reservation` with what the call used. `model` is the
    /// reservation's (as requested, usually the alias); `deployment` names
    /// what answered. If `cost_usd` is `None` (no price for the deployment
    /// that answered) but the reservation was priced, its estimate is
    /// recorded as the cost, so USD budgets stay conservative.
    ///
    /// The usage row is queued for the background writer: it is in the
    /// database about one group commit later ([`Self::flush`] waits for it).
    ///
    /// # Errors
    /// None today; kept for callers that handle storage failures.
    pub fn settle(
        &self,
        mut reservation: Reservation,
        actual: Usage,
        cost_usd: Option<f64>,
        deployment: &str,
        cached: bool,
    ) -> Result<(), BudgetError> {
        let cost = valid_cost(cost_usd).or(reservation.estimate.cost_usd);
        let leased = reservation.held.take().map(|held| {
            let spent = (
                to_i64(actual.prompt_tokens).saturating_add(to_i64(actual.completion_tokens)),
                cost.unwrap_or(0.0),
            );
            let slice = self.slices.get(&reservation.workspace);
            let mut slice = lease::lock(&slice);
            slice.used_tokens += spent.0 - held.0;
            slice.used_usd += spent.1 - held.1;
            spent
        });
        self.queue_usage(
            &reservation.workspace,
            &reservation.model,
            deployment,
            actual,
            cost,
            cached,
            leased,
        );
        Ok(())
    }

    /// Drops `reservation`: the call failed and nothing was spent.
    ///
    /// # Errors
    /// None today; kept for callers that handle storage failures.
    pub fn release(&self, reservation: Reservation) -> Result<(), BudgetError> {
        drop(reservation);
        Ok(())
    }

    /// Records usage that needed no reservation (a cache hit, say).
    ///
    /// # Errors
    /// None today; kept for callers that handle storage failures.
    pub fn record(
        &self,
        workspace: &str,
        model: &str,
        deployment: &str,
        actual: Usage,
        cost_usd: Option<f64>,
        cached: bool,
    ) -> Result<(), BudgetError> {
        self.queue_usage(
            workspace,
            model,
            deployment,
            actual,
            valid_cost(cost_usd),
            cached,
            None,
        );
        Ok(())
    }

    /// Queues an audit event for the writer (the same table as
    /// [`crate::audit::AuditLog`]), for events of answered calls.
    pub fn audit(
        &self,
        actor: crate::audit::Actor<'_>,
        workspace: Option<&str>,
        action: crate::audit::Action,
        detail: &str,
    ) {
        self.writer.push(Record::Audit(AuditRecord {
            ts_ms: crate::db::now_ms(),
            actor: actor.to_string(),
            workspace: workspace.map(str::to_owned),
            kind: action.as_str().to_owned(),
            detail: crate::audit::stored_detail(detail),
        }));
    }

    /// Waits while the writer is behind: admission's back-pressure.
    pub async fn room(&self) {
        self.writer.room().await;
    }

    /// Waits until every usage row and audit event queued so far is written.
    pub fn flush(&self) {
        self.writer.flush();
    }

    /// Records queued and not yet written.
    pub fn backlog(&self) -> usize {
        self.writer.backlog()
    }

    /// Flushes the writer, stops it and gives this process's budget leases
    /// back. The ledger still answers reads afterwards; calls settled
    /// after this are not written.
    pub fn shutdown(&self) {
        self.writer.stop();
        self.slices.release_all(&self.db);
    }

    #[allow(clippy::too_many_arguments)]
    fn queue_usage(
        &self,
        workspace: &str,
        model: &str,
        deployment: &str,
        actual: Usage,
        cost_usd: Option<f64>,
        cached: bool,
        leased: Option<(i64, f64)>,
    ) {
        let now = self.now();
        self.writer.push(Record::Usage(UsageRecord {
            workspace: workspace.to_owned(),
            ts_ms: now,
            day: utc_day(now),
            model: model.to_owned(),
            deployment: deployment.to_owned(),
            prompt_tokens: to_i64(actual.prompt_tokens),
            completion_tokens: to_i64(actual.completion_tokens),
            cost_usd,
            cached,
            leased,
        }));
    }

    /// Usage by workspace, UTC day and model (ordered so), for one
    /// workspace or all, as written so far (this process's pending rows
    /// are flushed first).
    ///
    /// # Errors
    /// Storage failures.
    pub fn usage(&self, workspace: Option<&str>) -> Result<Vec<UsageRow>, BudgetError> {
        self.flush();
        let rows = self.db.run(|conn| {
            conn.query(
                "SELECT workspace, day, model, COUNT(*),
                        CAST(SUM(prompt_tokens) AS BIGINT), CAST(SUM(completion_tokens) AS BIGINT),
                        CAST(COALESCE(SUM(cost_usd), 0) AS DOUBLE PRECISION),
                        CAST(SUM(cached) AS BIGINT),
                        CAST(SUM(CASE WHEN cost_usd IS NULL THEN 1 ELSE 0 END) AS BIGINT)
                 FROM gateway_usage WHERE CAST(?1 AS TEXT) IS NULL OR workspace = ?1
                 GROUP BY workspace, day, model ORDER BY workspace, day, model",
                args![workspace],
            )?
            .iter()
            .map(|r| -> Result<UsageRow, DbError> {
                Ok(UsageRow {
                    workspace: r.get(0)?,
                    day: r.get(1)?,
                    model: r.get(2)?,
                    calls: to_u64(r.get(3)?),
                    prompt_tokens: to_u64(r.get(4)?),
                    completion_tokens: to_u64(r.get(5)?),
                    cost_usd: r.get(6)?,
                    cached_calls: to_u64(r.get(7)?),
                    unpriced_calls: to_u64(r.get(8)?),
                })
            })
            .collect::<Result<Vec<_>, DbError>>()
        })?;
        Ok(rows)
    }

    /// What counts against `workspace`'s limits now: spent (this process's
    /// pending rows are flushed first), and reserved by calls in flight here
    /// plus leased by other processes.
    ///
    /// # Errors
    /// Storage failures.
    pub fn spend(&self, workspace: &str) -> Result<Spend, BudgetError> {
        self.flush();
        let now = self.now();
        let (used_tokens, used_usd) = {
            let slice = self.slices.get(workspace);
            let slice = lease::lock(&slice);
            (slice.used_tokens, slice.used_usd)
        };
        let held = self
            .db
            .run(|conn| lease::held(conn, workspace, self.slices.owner(), now))?;
        Ok(Spend {
            day_usd: held.day_usd,
            day_tokens: float_tokens(held.day_tokens),
            month_usd: held.month_usd,
            month_tokens: float_tokens(held.month_tokens),
            reserved_usd: held.others_usd + used_usd.max(0.0),
            reserved_tokens: float_tokens(held.others_tokens + used_tokens.max(0) as f64),
        })
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// This process's name as a lease owner: unique per ledger opened.
fn owner_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static OPENED: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        OPENED.fetch_add(1, Ordering::Relaxed)
    )
}

/// Finite, non-negative costs only; anything else is "unknown".
fn valid_cost(cost: Option<f64>) -> Option<f64> {
    cost.filter(|c| c.is_finite() && *c >= 0.0)
}

fn to_i64(tokens: u64) -> i64 {
    i64::try_from(tokens.min(MAX_STORED_TOKENS)).unwrap_or(i64::MAX)
}

fn to_u64(n: Option<i64>) -> u64 {
    n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

fn float_tokens(total: f64) -> u64 {
    // saturating float-to-int conversion
    total.max(0.0) as u64
}

/// The UTC date of `ms` since the epoch, `YYYY-MM-DD`.
pub fn utc_day(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    /// 2025-03-14T12:00:00Z
    const T0: i64 = 1_741_953_600_000;
    const DAY: i64 = 86_400_000;

    /// A ledger on `at` whose clock the test sets.
    fn ledger(at: &Location) -> (Arc<Ledger>, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(T0));
        let clock = Arc::clone(&now);
        let ledger = Ledger::open_at(at, move || clock.load(Ordering::SeqCst)).unwrap();
        (ledger, now)
    }

    fn usd(cost: f64) -> Estimate {
        Estimate {
            prompt_tokens: 10,
            max_completion_tokens: 10,
            cost_usd: Some(cost),
        }
    }

    fn tokens(n: u64) -> Estimate {
        Estimate {
            prompt_tokens: n / 2,
            max_completion_tokens: n - n / 2,
            cost_usd: None,
        }
    }

    const USED: Usage = Usage {
        prompt_tokens: 5,
        completion_tokens: 5,
    };

    #[test]
    fn dates() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(-1), "1969-12-31");
        assert_eq!(utc_day(T0), "2025-03-14");
        assert_eq!(utc_day(951_782_400_000), "2000-02-29");
        assert_eq!(utc_day(1_709_251_199_999), "2024-02-29");
        assert_eq!(utc_day(1_709_251_200_000), "2024-03-01");
        assert_eq!(utc_day(4_102_444_800_000), "2100-01-01");
    }

    fn concurrent(ledger: &Arc<Ledger>, budget: Budget, estimate: Estimate) -> Vec<Reservation> {
        let barrier = Arc::new(Barrier::new(50));
        let handles: Vec<_> = (0..50)
            .map(|_| {
                let (ledger, barrier) = (Arc::clone(ledger), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    ledger.reserve("dev", &budget, "default", estimate)
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let mut granted = Vec::new();
        for result in results {
            match result {
                Ok(r) => granted.push(r),
                Err(BudgetError::Exceeded { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }
        granted
    }

    /// A refusal's detail carries the caller's own text (a model alias, an
    /// MCP tool name). A NUL in it, which PostgreSQL's text cannot hold,
    /// must not fail the writer's batch and take the usage committed with
    /// it; a detail of megabytes is cut, so queued records stay small.
    #[test]
    fn an_audit_detail_with_a_nul_or_of_megabytes_loses_nothing_of_its_batch() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let reserved = ledger
                .reserve("dev", &Budget::default(), "default", usd(0.1))
                .unwrap();
            let denied = |detail: &str| {
                ledger.audit(
                    crate::audit::Actor::Workspace("dev"),
                    Some("dev"),
                    crate::audit::Action::GatewayDenied,
                    detail,
                )
            };
            denied("model `x\0y` is not available");
            denied(&format!("tool `{}` is not available", "z".repeat(4 << 20)));
            ledger
                .settle(reserved, USED, Some(0.05), "openai/gpt-4o-mini", false)
                .unwrap();
            ledger.flush();
            let spend = ledger.spend("dev").unwrap();
            assert!((spend.day_usd - 0.05).abs() < 1e-9, "{spend:?}");
            let audit = crate::audit::AuditLog::open_at(at).unwrap();
            let rows = audit
                .page(&crate::audit::AuditFilter {
                    kind: Some("gateway.denied".into()),
                    limit: 10,
                    ..Default::default()
                })
                .unwrap();
            let details: Vec<&str> = rows.iter().map(|r| r.event.detail.as_str()).collect();
            assert_eq!(
                details.len(),
                2,
                "{:?}",
                details.iter().map(|d| d.len()).collect::<Vec<_>>()
            );
            assert!(details.contains(&"model `x\u{FFFD}y` is not available"));
            let long = details.iter().find(|d| d.starts_with("tool `zzz")).unwrap();
            assert!(
                long.len() <= crate::audit::MAX_DETAIL_BYTES + 64,
                "{}",
                long.len()
            );
            assert!(long.ends_with("bytes cut)"), "{}", &long[long.len() - 40..]);
        });
    }

    #[test]
    fn fifty_concurrent_usd_reservations_allow_exactly_ten_then_settling_frees_room() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let budget = Budget {
                daily_usd: Some(1.0),
                ..Budget::default()
            };
            let granted = concurrent(&ledger, budget, usd(0.1));
            assert_eq!(granted.len(), 10);
            assert!(matches!(
                ledger.reserve("dev", &budget, "default", usd(0.1)),
                Err(BudgetError::Exceeded { .. })
            ));
            // each call cost half its estimate
            for r in granted {
                ledger
                    .settle(r, USED, Some(0.05), "openai/gpt-4o-mini", false)
                    .unwrap();
            }
            let spend = ledger.spend("dev").unwrap();
            assert!((spend.day_usd - 0.5).abs() < 1e-9, "{spend:?}");
            assert_eq!(spend.reserved_tokens, 0);
            let more = concurrent(&ledger, budget, usd(0.1));
            assert_eq!(more.len(), 5);
        });
    }

    #[test]
    fn fifty_concurrent_token_reservations_allow_exactly_ten() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let budget = Budget {
                daily_tokens: Some(1000),
                ..Budget::default()
            };
            let granted = concurrent(&ledger, budget, tokens(100));
            assert_eq!(granted.len(), 10);
            let spend = ledger.spend("dev").unwrap();
            assert_eq!(spend.reserved_tokens, 1000);
            // another workspace has its own budget
            ledger
                .reserve("other", &budget, "default", tokens(1000))
                .unwrap();
            // settle with fewer tokens than reserved: room for 9 more
            for r in granted {
                ledger
                    .settle(r, USED, None, "ollama/llama3.2", false)
                    .unwrap();
            }
            assert_eq!(ledger.spend("dev").unwrap().day_tokens, 100);
            assert_eq!(concurrent(&ledger, budget, tokens(100)).len(), 9);
        });
    }

    #[test]
    fn spend_survives_reopening() {
        crate::db::testing::each_backend(|at| {
            let open = || Ledger::open_at(at, crate::db::now_ms).unwrap();
            let budget = Budget {
                monthly_usd: Some(1.0),
                ..Budget::default()
            };
            {
                let ledger = open();
                let r = ledger.reserve("dev", &budget, "m", usd(0.9)).unwrap();
                ledger
                    .settle(r, USED, Some(0.9), "openai/x", false)
                    .unwrap();
            }
            let ledger = open();
            let err = ledger.reserve("dev", &budget, "m", usd(0.2)).unwrap_err();
            assert!(
                matches!(err, BudgetError::Exceeded { limit: Limit::MonthlyUsd(_), spent, .. } if (spent - 0.9).abs() < 1e-9),
                "{err:?}"
            );
            ledger.reserve("dev", &budget, "m", usd(0.1)).unwrap();
            assert_eq!(ledger.usage(Some("dev")).unwrap()[0].calls, 1);
        });
    }

    /// Spend by day sums every usage row: those written before the table
    /// existed (an older pincer) and those written after, by the trigger.
    #[test]
    fn spend_by_day_counts_usage_from_before_it_existed() {
        crate::db::testing::each_backend(|at| {
            let open = || Ledger::open_at(at, crate::db::now_ms).unwrap();
            let budget = Budget {
                daily_usd: Some(1.0),
                ..Budget::default()
            };
            {
                let ledger = open();
                let r = ledger.reserve("dev", &budget, "m", usd(0.4)).unwrap();
                ledger
                    .settle(r, USED, Some(0.4), "openai/x", false)
                    .unwrap();
            }
            // What a database looked like before: usage rows, no summary.
            let db = crate::db::Db::open(at).unwrap();
            db.run(|c| {
                let on = match c.dialect() {
                    crate::db::Dialect::Sqlite => "",
                    crate::db::Dialect::Postgres => " ON gateway_usage",
                };
                c.schema(&format!(
                    "DROP TRIGGER gateway_usage_spend_by_day{on}; DROP TABLE gateway_spend_by_day;"
                ))
            })
            .unwrap();
            drop(db);
            let ledger = open();
            let spend = ledger.spend("dev").unwrap();
            assert!((spend.day_usd - 0.4).abs() < 1e-9, "{spend:?}");
            assert_eq!(spend.day_tokens, 10);
            let r = ledger.reserve("dev", &budget, "m", usd(0.5)).unwrap();
            ledger
                .settle(r, USED, Some(0.5), "openai/x", false)
                .unwrap();
            assert!(matches!(
                ledger.reserve("dev", &budget, "m", usd(0.2)),
                Err(BudgetError::Exceeded { .. })
            ));
            let spend = ledger.spend("dev").unwrap();
            assert!((spend.day_usd - 0.9).abs() < 1e-9, "{spend:?}");
            assert_eq!(spend.day_tokens, 20);
            // Reopening neither sums again nor loses the rows.
            drop(ledger);
            let spend = open().spend("dev").unwrap();
            assert!((spend.day_usd - 0.9).abs() < 1e-9, "{spend:?}");
        });
    }

    #[test]
    fn daily_and_monthly_windows() {
        crate::db::testing::each_backend(|at| {
            let (ledger, now) = ledger(at);
            let budget = Budget {
                daily_usd: Some(0.6),
                monthly_usd: Some(1.0),
                ..Budget::default()
            };
            let spend = |cost: f64| {
                let r = ledger.reserve("dev", &budget, "m", usd(cost)).unwrap();
                ledger.settle(r, USED, Some(cost), "d", false).unwrap();
                // Until written, a settled call counts against every window (in
                // the lease); this test's clock jumps days within a millisecond.
                ledger.flush();
            };
            spend(0.5);
            let err = ledger.reserve("dev", &budget, "m", usd(0.2)).unwrap_err();
            assert!(
                matches!(
                    err,
                    BudgetError::Exceeded {
                        limit: Limit::DailyUsd(_),
                        ..
                    }
                ),
                "{err:?}"
            );
            // next UTC day: the daily window is fresh
            now.store(T0 + DAY, Ordering::SeqCst);
            spend(0.2);
            spend(0.2);
            // 0.9 this month: 0.4 more fits the day, not the month
            now.store(T0 + 2 * DAY, Ordering::SeqCst);
            let err = ledger.reserve("dev", &budget, "m", usd(0.4)).unwrap_err();
            assert!(
                matches!(
                    err,
                    BudgetError::Exceeded {
                        limit: Limit::MonthlyUsd(_),
                        ..
                    }
                ),
                "{err:?}"
            );
            spend(0.1);
            // exactly at the limit: nothing more, not even a cent
            assert!(ledger.reserve("dev", &budget, "m", usd(0.01)).is_err());
            // next month (2025-04-01)
            now.store(T0 + 18 * DAY, Ordering::SeqCst);
            assert_eq!(utc_day(T0 + 18 * DAY), "2025-04-01");
            spend(0.6);
            let days: Vec<String> = ledger
                .usage(Some("dev"))
                .unwrap()
                .into_iter()
                .map(|r| r.day)
                .collect();
            assert_eq!(
                days,
                ["2025-03-14", "2025-03-15", "2025-03-16", "2025-04-01"]
            );
        });
    }

    #[test]
    fn token_budgets() {
        crate::db::testing::each_backend(|at| {
            let (ledger, now) = ledger(at);
            let budget = Budget {
                daily_tokens: Some(500),
                monthly_tokens: Some(800),
                ..Budget::default()
            };
            let r = ledger.reserve("dev", &budget, "m", tokens(400)).unwrap();
            let used = Usage {
                prompt_tokens: 150,
                completion_tokens: 250,
            };
            ledger.settle(r, used, None, "d", false).unwrap();
            let err = ledger
                .reserve("dev", &budget, "m", tokens(101))
                .unwrap_err();
            assert_eq!(
                err,
                BudgetError::Exceeded {
                    workspace: "dev".into(),
                    limit: Limit::DailyTokens(500),
                    spent: 400.0,
                    requested: 101.0,
                }
            );
            ledger.reserve("dev", &budget, "m", tokens(100)).unwrap();
            // Written before the clock jumps a day (until then it counts
            // against every window).
            ledger.flush();
            now.store(T0 + DAY, Ordering::SeqCst);
            let err = ledger
                .reserve("dev", &budget, "m", tokens(401))
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    BudgetError::Exceeded {
                        limit: Limit::MonthlyTokens(800),
                        ..
                    }
                ),
                "{err:?}"
            );
            // a USD budget is not needed for unpriced models with token limits
            ledger.reserve("dev", &budget, "m", tokens(400)).unwrap();
        });
    }

    #[test]
    fn unpriced_models_are_refused_only_under_usd_limits() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let usd_budget = Budget {
                daily_usd: Some(1.0),
                ..Budget::default()
            };
            let err = ledger
                .reserve("dev", &usd_budget, "mystery/model", tokens(10))
                .unwrap_err();
            assert_eq!(
                err,
                BudgetError::Unpriced {
                    workspace: "dev".into(),
                    model: "mystery/model".into()
                }
            );
            let shown = err.to_string();
            assert!(shown.contains("gateway.prices"), "{shown}");
            assert!(
                shown.contains("\"mystery/model\": {input_per_1m"),
                "{shown}"
            );
            let (status, body) = err.to_openai_error();
            assert_eq!(status, 400);
            assert_eq!(body["error"]["code"], "model_price_unknown");
            // NaN is no price either
            assert!(matches!(
                ledger.reserve("dev", &usd_budget, "m", usd(f64::NAN)),
                Err(BudgetError::Unpriced { .. })
            ));
            // no limits: allowed and recorded with tokens only
            let r = ledger
                .reserve("dev", &Budget::default(), "mystery/model", tokens(10))
                .unwrap();
            ledger
                .settle(r, USED, None, "mystery/model", false)
                .unwrap();
            let rows = ledger.usage(None).unwrap();
            assert_eq!((rows[0].unpriced_calls, rows[0].cost_usd), (1, 0.0));
        });
    }

    #[test]
    fn released_dropped_and_expired_reservations_stop_counting() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let budget = Budget {
                daily_usd: Some(1.0),
                ..Budget::default()
            };
            let r = ledger.reserve("dev", &budget, "m", usd(1.0)).unwrap();
            assert!(ledger.reserve("dev", &budget, "m", usd(0.5)).is_err());
            ledger.release(r).unwrap();
            let r = ledger.reserve("dev", &budget, "m", usd(1.0)).unwrap();
            drop(r); // e.g. the client went away mid-call
            ledger.reserve("dev", &budget, "m", usd(1.0)).unwrap();
            assert!(ledger.usage(None).unwrap().is_empty());
        });
    }

    #[test]
    fn a_crashed_process_lease_stops_counting_after_its_ttl() {
        crate::db::testing::each_backend(|at| {
            let budget = Budget {
                daily_usd: Some(1.0),
                ..Budget::default()
            };
            // The crashed process: its clock stands still, so it never renews
            // its lease past T0 + LEASE_TTL_MS; its reservation is never settled.
            let crashed = Ledger::open_at(at, || T0).unwrap();
            std::mem::forget(crashed.reserve("dev", &budget, "m", usd(0.6)).unwrap());
            std::mem::forget(crashed);
            let now = Arc::new(AtomicI64::new(T0));
            let clock = now.clone();
            let ledger = Ledger::open_at(at, move || clock.load(Ordering::SeqCst)).unwrap();
            let err = ledger.reserve("dev", &budget, "m", usd(0.5)).unwrap_err();
            assert!(
                matches!(err, BudgetError::Exceeded { spent, .. } if (spent - 0.6).abs() < 1e-9),
                "{err:?}"
            );
            ledger.reserve("dev", &budget, "m", usd(0.4)).unwrap();
            now.store(T0 + LEASE_TTL_MS - 1, Ordering::SeqCst);
            assert!(ledger.reserve("dev", &budget, "m", usd(0.5)).is_err());
            now.store(T0 + LEASE_TTL_MS, Ordering::SeqCst);
            ledger.reserve("dev", &budget, "m", usd(1.0)).unwrap();
        });
    }

    #[test]
    fn two_ledgers_on_one_database_never_overspend_together() {
        crate::db::testing::each_backend(|at| {
            let budget = Budget {
                daily_tokens: Some(1000),
                ..Budget::default()
            };
            let open = || Ledger::open_at(at, crate::db::now_ms).unwrap();
            let (a, b) = (open(), open());
            let barrier = Arc::new(Barrier::new(40));
            let handles: Vec<_> = (0..40)
                .map(|i| {
                    let ledger = if i % 2 == 0 { a.clone() } else { b.clone() };
                    let barrier = barrier.clone();
                    std::thread::spawn(move || {
                        barrier.wait();
                        ledger.reserve("dev", &budget, "default", tokens(100))
                    })
                })
                .collect();
            let granted: Vec<_> = handles
                .into_iter()
                .filter_map(|h| h.join().unwrap().ok())
                .collect();
            // Every reservation stays in flight, so the whole budget is used.
            assert_eq!(granted.len(), 10);
            let spent = Usage {
                prompt_tokens: 50,
                completion_tokens: 50,
            };
            for r in granted {
                let ledger = r.ledger.clone();
                ledger.settle(r, spent, None, "d", false).unwrap();
            }
            a.flush();
            b.flush();
            assert_eq!(a.spend("dev").unwrap().day_tokens, 1000);
            assert!(a.reserve("dev", &budget, "default", tokens(1)).is_err());
            assert!(b.reserve("dev", &budget, "default", tokens(1)).is_err());
            assert_eq!(b.usage(Some("dev")).unwrap()[0].calls, 10);
        });
    }

    #[test]
    fn a_lease_waiting_on_another_process_lock_leaves_a_one_thread_runtime_serving() {
        // SQLite's own lock: PostgreSQL's lock wait is the same code path
        // with another server's error (`db::conn`'s lock test).
        let dir = tempfile::tempdir().unwrap();
        let (ledger, _) = ledger(&Location::Sqlite(dir.path().join("b.db")));
        let budget = Budget {
            daily_tokens: Some(1000),
            ..Budget::default()
        };
        // Another process holds the write lock the lease must grow under.
        let other = crate::db::open(&dir.path().join("b.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let reserving = tokio::spawn({
                let ledger = ledger.clone();
                async move {
                    ledger
                        .reserve_async("dev", budget, "default", tokens(100))
                        .await
                }
            });
            // The runtime's one thread goes on serving others meanwhile.
            for _ in 0..10 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert!(!reserving.is_finished(), "it waits for the lock");
            other.execute_batch("ROLLBACK").unwrap();
            let reservation = reserving.await.unwrap().unwrap();
            assert_eq!(reservation.held, Some((to_i64(tokens(100).tokens()), 0.0)));
        });
        // Room in the lease now: no database, no blocking thread.
        let again = runtime.block_on(ledger.reserve_async("dev", budget, "default", tokens(100)));
        assert!(again.unwrap().held.is_some());
    }

    #[test]
    fn shutdown_writes_what_is_queued_and_gives_the_lease_back() {
        crate::db::testing::each_backend(|at| {
            let budget = Budget {
                daily_tokens: Some(1000),
                ..Budget::default()
            };
            let a = Ledger::open_at(at, crate::db::now_ms).unwrap();
            for _ in 0..5 {
                let r = a.reserve("dev", &budget, "m", tokens(100)).unwrap();
                a.settle(r, USED, None, "d", false).unwrap();
            }
            a.audit(
                crate::audit::Actor::Workspace("dev"),
                Some("dev"),
                crate::audit::Action::GatewayCall,
                "m: 5 + 5 tokens",
            );
            drop(a);
            let b = Ledger::open_at(at, crate::db::now_ms).unwrap();
            assert_eq!(b.usage(Some("dev")).unwrap()[0].calls, 5);
            // a's lease is gone: all but the 50 spent tokens are b's to lease
            assert_eq!(b.spend("dev").unwrap().reserved_tokens, 0);
            b.reserve("dev", &budget, "m", tokens(950)).unwrap();
            let audit = crate::audit::AuditLog::open_at(at).unwrap();
            assert_eq!(audit.for_workspace("dev", 10).unwrap().len(), 1);
        });
    }

    #[test]
    fn settling_an_unknown_cost_keeps_the_estimate() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let budget = Budget {
                daily_usd: Some(1.0),
                ..Budget::default()
            };
            // the priced deployment failed over to an unpriced one
            let r = ledger.reserve("dev", &budget, "m", usd(0.7)).unwrap();
            ledger
                .settle(r, USED, None, "vllm/unpriced", false)
                .unwrap();
            assert!((ledger.spend("dev").unwrap().day_usd - 0.7).abs() < 1e-9);
            assert!(ledger.reserve("dev", &budget, "m", usd(0.4)).is_err());
        });
    }

    #[test]
    fn exceeded_error_is_clear_and_openai_shaped() {
        let err = BudgetError::Exceeded {
            workspace: "dev".into(),
            limit: Limit::DailyUsd(1.0),
            spent: 0.95,
            requested: 0.1,
        };
        let shown = err.to_string();
        for needle in [
            "budget exceeded for workspace `dev`",
            "daily_usd 1.00",
            "$0.9500 spent or reserved today (UTC)",
            "up to $0.1000",
            "workspaces.dev.budget.daily_usd",
        ] {
            assert!(shown.contains(needle), "{needle:?} missing from {shown}");
        }
        let (status, body) = err.to_openai_error();
        assert_eq!(status, 429);
        assert_eq!(body["error"]["type"], "budget_exceeded");
        assert_eq!(body["error"]["code"], "budget_exceeded");
        assert_eq!(body["error"]["message"], shown);
        let tokens = BudgetError::Exceeded {
            workspace: "dev".into(),
            limit: Limit::MonthlyTokens(1000),
            spent: 900.0,
            requested: 4196.0,
        };
        let shown = tokens.to_string();
        assert!(shown.contains("monthly_tokens 1000"), "{shown}");
        assert!(
            shown.contains("900 tokens spent or reserved this month"),
            "{shown}"
        );
        assert!(shown.contains("next UTC month"), "{shown}");
        let (status, body) = BudgetError::Storage("disk I/O error".into()).to_openai_error();
        assert_eq!(status, 503);
        assert!(!body.to_string().contains("disk"));
    }

    #[test]
    fn usage_groups_by_workspace_day_and_model() {
        crate::db::testing::each_backend(|at| {
            let (ledger, now) = ledger(at);
            let none = Budget::default();
            let call = |ws: &str, model: &str, cost: Option<f64>, cached: bool| {
                let r = ledger.reserve(ws, &none, model, usd(0.0)).unwrap();
                let used = Usage {
                    prompt_tokens: 10,
                    completion_tokens: 20,
                };
                ledger.settle(r, used, cost, "dep", cached).unwrap();
            };
            call("dev", "a", Some(0.25), false);
            call("dev", "a", Some(0.25), false);
            ledger
                .record("dev", "a", "cache", USED, Some(0.0), true)
                .unwrap();
            call("dev", "b", Some(1.0), false);
            call("ops", "a", Some(2.0), false);
            now.store(T0 + DAY, Ordering::SeqCst);
            call("dev", "a", Some(0.5), false);
            let rows = ledger.usage(Some("dev")).unwrap();
            assert_eq!(rows.len(), 3);
            assert_eq!(
                rows[0],
                UsageRow {
                    workspace: "dev".into(),
                    day: "2025-03-14".into(),
                    model: "a".into(),
                    calls: 3,
                    prompt_tokens: 25,
                    completion_tokens: 45,
                    cost_usd: 0.5,
                    cached_calls: 1,
                    unpriced_calls: 0,
                }
            );
            assert_eq!((rows[1].model.as_str(), rows[1].cost_usd), ("b", 1.0));
            assert_eq!(rows[2].day, "2025-03-15");
            let all = ledger.usage(None).unwrap();
            assert_eq!(all.len(), 4);
            assert_eq!(all[3].workspace, "ops");
            assert!(ledger.usage(Some("nobody")).unwrap().is_empty());
        });
    }

    #[test]
    fn unlimited_workspaces_reserve_nothing() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let r = ledger
                .reserve("dev", &Budget::default(), "m", usd(1e9))
                .unwrap();
            assert_eq!(ledger.spend("dev").unwrap(), Spend::default());
            assert_eq!(r.workspace(), "dev");
            assert_eq!(r.model(), "m");
            ledger.release(r).unwrap();
        });
    }

    #[test]
    fn estimates() {
        let price = Price {
            input_per_1m: 1.0,
            output_per_1m: 2.0,
        };
        let e = Estimate::new(1000, None, Some(price));
        assert_eq!(e.max_completion_tokens, DEFAULT_MAX_COMPLETION_TOKENS);
        assert_eq!(e.tokens(), 1000 + 4096);
        assert!((e.cost_usd.unwrap() - (0.001 + 2.0 * 4096.0 / 1e6)).abs() < 1e-12);
        assert_eq!(Estimate::new(1, Some(5), None).cost_usd, None);

        let request = json!({
            "model": "default",
            "messages": [{"role": "user", "content": "Hello there, how are you today?"}],
        });
        let e = Estimate::for_request(&request, None);
        assert_eq!(e.max_completion_tokens, 4096);
        // 31 ASCII chars -> 8, plus framing and keys; well above the ~8 real tokens
        assert!((10..60).contains(&e.prompt_tokens), "{e:?}");
        let request = json!({"messages": [], "max_tokens": 100, "n": 3});
        assert_eq!(
            Estimate::for_request(&request, None).max_completion_tokens,
            300
        );
        let request = json!({"messages": [], "max_completion_tokens": 50, "max_tokens": 100});
        assert_eq!(
            Estimate::for_request(&request, None).max_completion_tokens,
            50
        );
        let huge = json!({"messages": [], "max_tokens": u64::MAX, "n": 2});
        assert_eq!(Estimate::for_request(&huge, None).tokens(), u64::MAX);
    }

    #[test]
    fn prompt_token_guesses() {
        let chinese = json!({"messages": [{"role": "user", "content": "你好，世界"}]});
        let english = json!({"messages": [{"role": "user", "content": "hello"}]});
        assert!(estimate_prompt_tokens(&chinese) >= estimate_prompt_tokens(&english) + 3);
        let image = format!("data:image/png;base64,{}", "A".repeat(1_000_000));
        let with_image = json!({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": image}}
        ]}]});
        let guess = estimate_prompt_tokens(&with_image);
        assert!(
            (DATA_URL_TOKENS..DATA_URL_TOKENS + 100).contains(&guess),
            "{guess}"
        );
        assert_eq!(
            estimate_prompt_tokens(&json!({"model": "x".repeat(400), "user": "y".repeat(400)})),
            0
        );
    }

    #[test]
    fn huge_estimates_are_refused_not_overflowed() {
        crate::db::testing::each_backend(|at| {
            let (ledger, _) = ledger(at);
            let budget = Budget {
                daily_tokens: Some(u64::MAX),
                ..Budget::default()
            };
            let e = Estimate {
                prompt_tokens: u64::MAX,
                max_completion_tokens: u64::MAX,
                cost_usd: None,
            };
            // capped when stored, so sums never overflow
            for _ in 0..3 {
                std::mem::forget(ledger.reserve("dev", &budget, "m", e).unwrap());
            }
            assert_eq!(ledger.spend("dev").unwrap().reserved_tokens, 3 << 40);
        });
    }
}
