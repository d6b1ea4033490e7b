//! The console's pages and the forms they post. Each reads the stores and
//! calls the functions the CLI calls (`operator::decide`,
//! `operator::schedule_listing`, `operator::policy_report`, …).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::{Console, WebSession, guard};
use crate::approvals::Wanted;
use crate::operator::Operator;

type Shared = State<Arc<Console>>;

/// A template's context, `key => value` or a variable's own name, each
/// value serialized.
macro_rules! page_context {
    ($($key:ident $(=> $value:expr)?),* $(,)?) => {{
        let mut map = serde_json::Map::new();
        $(map.insert(
            stringify!($key).to_owned(),
            serde_json::to_value(page_context!(@value $key $(, $value)?)).unwrap_or_default(),
        );)*
        serde_json::Value::Object(map)
    }};
    (@value $key:ident) => { &$key };
    (@value $key:ident, $value:expr) => { &$value };
}

pub fn routes() -> Router<Arc<Console>> {
    Router::new()
        .route("/", get(overview))
        .route("/signin", get(signin))
        .route("/login", get(login))
        .route("/logout", post(logout))
        .route("/static/console.css", get(css))
        .route("/sessions", get(sessions))
        .route("/sessions/{id}", get(session))
        .route("/approvals", get(approvals))
        .route("/approvals/{id}/decide", post(decide))
        .route("/approvals/rules/revoke", post(revoke))
        .route("/schedules", get(schedules))
        .route("/schedules/{workspace}/{id}", get(task))
        .route("/schedules/{workspace}/{id}/{action}", post(task_action))
        .route("/workspaces", get(workspaces))
        .route("/workspaces/{name}", get(workspace))
        .route("/workspaces/{name}/memories/{id}/forget", post(forget))
        .route("/usage", get(usage))
        .route("/audit", get(audit))
        .route("/audit/stream", get(super::live::audit_tail))
        .route("/static/console.js", get(js))
        .route("/channels", get(channels))
        .route("/channels/outbox/{id}/retry", post(retry))
}

/// A page that could not be shown: its status and why, shown escaped.
pub struct PageError(StatusCode, String);

impl PageError {
    pub fn new(status: StatusCode, why: impl Into<String>) -> Self {
        Self(status, why.into())
    }
}

impl<E: std::fmt::Display> From<E> for PageError {
    fn from(e: E) -> Self {
        Self(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = html_escape(&self.1);
        (
            self.0,
            Html(format!(
                "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Error · pincer</title>\
                 <link rel=\"stylesheet\" href=\"/static/console.css\"></head><body><main><h1>Error</h1>\
                 <p role=\"alert\">{body}</p><p><a href=\"/\">Overview</a></p></main></body></html>"
            )),
        )
            .into_response()
    }
}

fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(super) fn refused(why: impl std::fmt::Display) -> PageError {
    PageError(StatusCode::BAD_REQUEST, why.to_string())
}

pub(super) type Page = Result<Response, PageError>;

pub(super) fn render(console: &Console, name: &str, value: serde_json::Value) -> Page {
    Ok(Html(console.templates.render(name, value)?).into_response())
}

/// The page after a form: what was done, and the way back.
fn done(console: &Console, session: &WebSession, message: &str, back: &str) -> Page {
    render(
        console,
        "message.html",
        page_context! { title => "Done", csrf => session.csrf, heading => "Done", message, back },
    )
}

/// A filter page's query string: the fields that are set, encoded.
fn query_of(fields: &[(&str, &Option<String>)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in fields {
        if let Some(value) = value {
            query.append_pair(key, value);
        }
    }
    query.finish()
}

fn blank(text: Option<String>) -> Option<String> {
    text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty())
}

async fn css() -> Response {
    static_file(
        "text/css; charset=utf-8",
        include_str!("static/console.css"),
    )
}

async fn js() -> Response {
    static_file(
        "text/javascript; charset=utf-8",
        include_str!("static/console.js"),
    )
}

fn static_file(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

#[derive(Deserialize)]
struct LoginQuery {
    token: Option<String>,
}

async fn signin(State(console): Shared) -> Page {
    render(
        &console,
        "signin.html",
        page_context! { title => "Sign in", csrf => "", refused => false },
    )
}

async fn login(State(console): Shared, Query(q): Query<LoginQuery>) -> Page {
    let now = crate::db::now_ms();
    let redeemed = match q.token {
        Some(token) => console.auth.redeem(&token, console.ttl, now)?,
        None => None,
    };
    let Some((cookie, _)) = redeemed else {
        let page = console.templates.render(
            "signin.html",
            page_context! { title => "Sign in", csrf => "", refused => true },
        )?;
        return Ok((StatusCode::FORBIDDEN, Html(page)).into_response());
    };
    console.audit.record(
        crate::audit::Actor::Web,
        None,
        crate::audit::Action::WebSignedIn,
        "signed in with a one-time link",
    );
    Ok((
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                guard::session_cookie(&cookie, console.ttl, console.secure),
            ),
            (header::LOCATION, "/".to_owned()),
        ],
    )
        .into_response())
}

async fn logout(State(console): Shared, Extension(session): Extension<WebSession>) -> Page {
    console.auth.sign_out(&session.id)?;
    console.audit.record(
        crate::audit::Actor::Web,
        None,
        crate::audit::Action::WebSignedOut,
        "signed out",
    );
    Ok((
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, guard::cleared_cookie()),
            (header::LOCATION, "/signin".to_owned()),
        ],
    )
        .into_response())
}

async fn overview(State(console): Shared, Extension(session): Extension<WebSession>) -> Page {
    let pending = console
        .agent
        .gateway()
        .approvals()
        .store()
        .pending(crate::db::now_ms())?
        .len();
    let sessions = console
        .agent
        .sessions()
        .list(&crate::sessions::SessionFilter {
            limit: 10,
            ..Default::default()
        })?;
    let audit = console.audit.recent(None, 10)?;
    let tasks = crate::operator::schedule_listing(&console.ctx, None)
        .map(|l| l["tasks"].as_array().map_or(0, Vec::len))
        .unwrap_or(0);
    let ledger = console.agent.gateway().ledger();
    let mut today_usd = 0.0;
    for name in console.ctx.config.workspaces.keys() {
        today_usd += ledger.spend(name)?.day_usd;
    }
    let workspaces: Vec<&String> = console.ctx.config.workspaces.keys().collect();
    render(
        &console,
        "overview.html",
        page_context! {
            title => "Overview", csrf => session.csrf, pending, sessions, audit, tasks,
            today_usd, workspaces,
        },
    )
}

#[derive(Deserialize, Default)]
struct SessionQuery {
    workspace: Option<String>,
    channel: Option<String>,
    sender: Option<String>,
    text: Option<String>,
    before: Option<i64>,
}

const PAGE_ROWS: u32 = 50;

async fn sessions(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Query(q): Query<SessionQuery>,
) -> Page {
    let filter = crate::sessions::SessionFilter {
        workspace: blank(q.workspace),
        channel: blank(q.channel),
        sender: blank(q.sender),
        text: blank(q.text),
        before_id: q.before,
        limit: PAGE_ROWS,
    };
    let found = console.agent.sessions().list(&filter)?;
    let next = (found.len() == PAGE_ROWS as usize)
        .then(|| found.last().map(|s| s.id))
        .flatten()
        .map(|last| {
            let query = query_of(&[
                ("workspace", &filter.workspace),
                ("channel", &filter.channel),
                ("sender", &filter.sender),
                ("text", &filter.text),
                ("before", &Some(last.to_string())),
            ]);
            format!("/sessions?{query}")
        });
    render(
        &console,
        "sessions.html",
        page_context! {
            title => "Sessions", csrf => session.csrf, sessions => found, next,
            filter => json!({
                "workspace": filter.workspace.unwrap_or_default(),
                "channel": filter.channel.unwrap_or_default(),
                "sender": filter.sender.unwrap_or_default(),
                "text": filter.text.unwrap_or_default(),
            }),
        },
    )
}

/// A stored chat message as the page shows it: role, text, tool calls.
pub(super) fn shown_message(message: &serde_json::Value) -> serde_json::Value {
    let text = match &message["content"] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    let calls: Vec<String> = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    format!(
                        "{}({})",
                        c["function"]["name"].as_str().unwrap_or("?"),
                        c["function"]["arguments"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    json!({
        "role": message["role"].as_str().unwrap_or("?"),
        "name": message["name"].as_str().or(message["tool_call_id"].as_str()),
        "text": text,
        "calls": calls,
    })
}

async fn session(
    State(console): Shared,
    Extension(web): Extension<WebSession>,
    Path(id): Path<i64>,
) -> Page {
    let store = console.agent.sessions();
    let Some(found) = store.get(id)? else {
        return Err(PageError(
            StatusCode::NOT_FOUND,
            format!("no session #{id}"),
        ));
    };
    let messages = store.messages(id)?;
    let mut turns = Vec::new();
    for record in store.turns(id)? {
        let shown: Vec<serde_json::Value> = messages
            .iter()
            .filter(|m| m.turn_id == record.id)
            .map(|m| shown_message(&m.message))
            .collect();
        let tools = store.tool_calls(&record.id)?;
        turns.push(json!({"record": record, "messages": shown, "tools": tools}));
    }
    render(
        &console,
        "session.html",
        page_context! { title => format!("Session #{id}"), csrf => web.csrf, session => found, turns },
    )
}

async fn approvals(State(console): Shared, Extension(session): Extension<WebSession>) -> Page {
    let store = console.agent.gateway().approvals().store();
    let pending: Vec<_> = store
        .pending(crate::db::now_ms())?
        .iter()
        .map(crate::operator::as_json)
        .collect();
    let decided: Vec<_> = store
        .decided(50)?
        .iter()
        .map(crate::operator::as_json)
        .collect();
    let mut rules = Vec::new();
    for workspace in console.ctx.config.workspaces.keys() {
        for rule in store.rules(workspace)? {
            rules.push(json!({"workspace": workspace, "rule": rule.to_string()}));
        }
    }
    render(
        &console,
        "approvals.html",
        page_context! { title => "Approvals", csrf => session.csrf, pending, decided, rules },
    )
}

#[derive(Deserialize)]
struct DecideForm {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    /// Where to go after deciding: the chat page the request showed on.
    #[serde(default)]
    back: Option<String>,
}

async fn decide(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Path(id): Path<String>,
    Form(form): Form<DecideForm>,
) -> Page {
    let wanted = match form.decision.as_str() {
        "once" => Wanted::Once,
        "session" => Wanted::Session,
        "always" => Wanted::Always(None),
        "deny" => Wanted::Deny(blank(form.reason)),
        other => return Err(refused(format!("unknown decision `{other}`"))),
    };
    let said = crate::operator::decide(
        console.agent.gateway().approvals(),
        &console.audit,
        &id,
        wanted,
        Operator::Web,
    )
    .map_err(|e| refused(format!("{e:#}")))?;
    match form.back.filter(|b| is_chat_path(b)) {
        Some(back) => Ok(axum::response::Redirect::to(&back).into_response()),
        None => done(&console, &session, &said, "/approvals"),
    }
}

/// Only the console's own chat page is a place to go back to, so a
/// form cannot send the browser to another site.
fn is_chat_path(back: &str) -> bool {
    back == "/chat" || back.starts_with("/chat?")
}

#[derive(Deserialize)]
struct RevokeForm {
    workspace: String,
    rule: String,
}

async fn revoke(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Form(form): Form<RevokeForm>,
) -> Page {
    console
        .ctx
        .check_workspace(&form.workspace)
        .map_err(refused)?;
    let said = crate::operator::revoke(
        console.agent.gateway().approvals(),
        &console.audit,
        &form.workspace,
        &form.rule,
        Operator::Web,
    )
    .map_err(|e| refused(format!("{e:#}")))?;
    done(&console, &session, &said, "/approvals")
}

async fn schedules(State(console): Shared, Extension(session): Extension<WebSession>) -> Page {
    let listing = crate::operator::schedule_listing(&console.ctx, None)?;
    render(
        &console,
        "schedules.html",
        page_context! {
            title => "Schedules", csrf => session.csrf,
            tasks => listing["tasks"].clone(), problems => listing["problems"].clone(),
        },
    )
}

async fn task(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Path((workspace, id)): Path<(String, String)>,
) -> Page {
    let (workspace, paused, runs) =
        crate::operator::task_history(&console.ctx, &id, Some(&workspace), 50)
            .map_err(|e| PageError(StatusCode::NOT_FOUND, format!("{e:#}")))?;
    render(
        &console,
        "task.html",
        page_context! { title => format!("Task {id}"), csrf => session.csrf, id, workspace, paused, runs },
    )
}

async fn task_action(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Path((workspace, id, action)): Path<(String, String, String)>,
) -> Page {
    use crate::audit::{Action, Actor};
    let (said, kind) = match action.as_str() {
        "pause" | "resume" => (
            crate::operator::set_task_paused(
                &console.ctx,
                &id,
                Some(&workspace),
                action == "pause",
            )
            .map_err(|e| refused(format!("{e:#}")))?,
            if action == "pause" {
                Action::SchedulePaused
            } else {
                Action::ScheduleResumed
            },
        ),
        "approve" | "cancel" => {
            let said = crate::operator::decide_agent_task(
                &console.ctx,
                &id,
                Some(&workspace),
                action == "approve",
                Actor::Web,
            )
            .map_err(|e| refused(format!("{e:#}")))?;
            // Audited by `decide_agent_task`, as the CLI's are.
            return done(
                &console,
                &session,
                &said,
                &format!("/schedules/{workspace}/{id}"),
            );
        }
        "run" => {
            let (run_id, _) = crate::operator::run_task_soon(&console.ctx, &id, Some(&workspace))
                .map_err(|e| refused(format!("{e:#}")))?;
            (
                format!("queued run #{run_id} of task `{id}`; its history shows the outcome"),
                Action::ScheduleRunRequested,
            )
        }
        other => {
            return Err(PageError(
                StatusCode::NOT_FOUND,
                format!("no action `{other}`"),
            ));
        }
    };
    console
        .audit
        .record(Actor::Web, Some(&workspace), kind, &said);
    done(
        &console,
        &session,
        &said,
        &format!("/schedules/{workspace}/{id}"),
    )
}

async fn workspaces(State(console): Shared, Extension(session): Extension<WebSession>) -> Page {
    let rows: Vec<_> = console
        .ctx
        .config
        .workspaces
        .iter()
        .map(|(name, ws)| {
            json!({
                "name": name,
                "model": ws.model.clone().unwrap_or_else(|| crate::config::DEFAULT_MODEL_ALIAS.to_owned()),
                "container": console.agent.runtime().container_name(name),
                "egress": ws.egress,
            })
        })
        .collect();
    render(
        &console,
        "workspaces.html",
        page_context! { title => "Workspaces", csrf => session.csrf, workspaces => rows },
    )
}

#[derive(Deserialize)]
struct MemoryQuery {
    q: Option<String>,
}

async fn workspace(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Path(name): Path<String>,
    Query(query): Query<MemoryQuery>,
) -> Page {
    console
        .ctx
        .check_workspace(&name)
        .map_err(|e| PageError(StatusCode::NOT_FOUND, e.to_string()))?;
    let report = crate::operator::policy_report(&console.ctx, &name)?;
    let memory = console.ctx.memory_store()?;
    let q = blank(query.q);
    let memories: Vec<_> = match &q {
        Some(q) => memory
            .search(&name, q, 50)?
            .into_iter()
            .map(|r| r.memory)
            .collect(),
        None => memory.list(&name, 100)?,
    };
    render(
        &console,
        "workspace.html",
        page_context! {
            title => format!("Workspace {name}"), csrf => session.csrf, name, memories,
            q => q.unwrap_or_default(), report => serde_json::to_string_pretty(&report)?,
        },
    )
}

async fn forget(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Path((name, id)): Path<(String, i64)>,
) -> Page {
    console.ctx.check_workspace(&name).map_err(refused)?;
    if !console.ctx.memory_store()?.forget(&name, id)? {
        return Err(refused(format!("workspace {name} has no memory #{id}")));
    }
    console.audit.record(
        crate::audit::Actor::Web,
        Some(&name),
        crate::audit::Action::MemoryForgotten,
        &format!("memory #{id} forgotten"),
    );
    done(
        &console,
        &session,
        &format!("forgot memory #{id}"),
        &format!("/workspaces/{name}"),
    )
}

/// How many days the usage chart covers.
const CHART_DAYS: i64 = 30;

async fn usage(State(console): Shared, Extension(session): Extension<WebSession>) -> Page {
    let ledger = console.agent.gateway().ledger();
    let rows = ledger.usage(None)?;
    let now = crate::db::now_ms();
    let days: Vec<String> = (0..CHART_DAYS)
        .rev()
        .map(|back| crate::gateway::utc_day(now - back * 86_400_000))
        .collect();
    let mut per_day: BTreeMap<&str, f64> = BTreeMap::new();
    for row in &rows {
        *per_day.entry(row.day.as_str()).or_default() += row.cost_usd;
    }
    let top = days
        .iter()
        .map(|d| per_day.get(d.as_str()).copied().unwrap_or(0.0))
        .fold(0.0_f64, f64::max);
    let (width, height, bar) = (CHART_DAYS * 20, 120_i64, 16_i64);
    let bars: Vec<_> = days
        .iter()
        .enumerate()
        .map(|(i, day)| {
            let usd = per_day.get(day.as_str()).copied().unwrap_or(0.0);
            let h = if top > 0.0 {
                ((usd / top) * (height - 10) as f64).round() as i64
            } else {
                0
            };
            json!({
                "x": i as i64 * 20 + 2, "y": height - h, "w": bar, "h": h,
                "label": format!("{day}: ${usd:.4}"),
            })
        })
        .collect();
    let mut budgets = Vec::new();
    for (name, ws) in &console.ctx.config.workspaces {
        let spend = ledger.spend(name)?;
        let limit = |usd: Option<f64>, tokens: Option<u64>| match (usd, tokens) {
            (None, None) => "none".to_owned(),
            (usd, tokens) => [
                usd.map(|u| format!("${u:.2}")),
                tokens.map(|t| format!("{t} tokens")),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" · "),
        };
        budgets.push(json!({
            "workspace": name,
            "day_usd": spend.day_usd, "day_tokens": spend.day_tokens,
            "month_usd": spend.month_usd, "month_tokens": spend.month_tokens,
            "daily": limit(ws.budget.daily_usd, ws.budget.daily_tokens),
            "monthly": limit(ws.budget.monthly_usd, ws.budget.monthly_tokens),
        }));
    }
    render(
        &console,
        "usage.html",
        page_context! {
            title => "Usage", csrf => session.csrf, rows, budgets, days,
            chart => json!({"width": width, "height": height, "bars": bars}),
        },
    )
}

#[derive(Deserialize, Default)]
struct AuditQuery {
    workspace: Option<String>,
    kind: Option<String>,
    actor: Option<String>,
    before: Option<i64>,
}

async fn audit(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Query(q): Query<AuditQuery>,
) -> Page {
    let filter = crate::audit::AuditFilter {
        workspace: blank(q.workspace),
        kind: blank(q.kind),
        actor: blank(q.actor),
        after_id: None,
        before_id: q.before,
        limit: 100,
    };
    let rows = console.audit.page(&filter)?;
    let base = query_of(&[
        ("workspace", &filter.workspace),
        ("kind", &filter.kind),
        ("actor", &filter.actor),
    ]);
    let next = (rows.len() == 100)
        .then(|| {
            rows.last()
                .map(|r| format!("/audit?{base}&before={}", r.id))
        })
        .flatten();
    let events: Vec<_> = rows.iter().map(|r| &r.event).collect();
    // The first page follows new events live (with the page's filter).
    let tail = filter.before_id.is_none().then(|| {
        let newest = rows.first().map_or(0, |r| r.id);
        let sep = if base.is_empty() { "" } else { "&" };
        format!("/audit/stream?{base}{sep}after={newest}")
    });
    render(
        &console,
        "audit.html",
        page_context! {
            title => "Audit log", csrf => session.csrf, events, next, tail,
            filter => json!({
                "workspace": filter.workspace.clone().unwrap_or_default(),
                "kind": filter.kind.clone().unwrap_or_default(),
                "actor": filter.actor.clone().unwrap_or_default(),
            }),
        },
    )
}

async fn channels(State(console): Shared, Extension(session): Extension<WebSession>) -> Page {
    let snapshot = crate::daemon::status::read(&console.ctx.home);
    let store = console.ctx.channel_store()?;
    let depth: BTreeMap<String, u64> = store.outbox_depth()?.into_iter().collect();
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for (name, channel) in &console.ctx.config.channels {
        let status = snapshot
            .as_ref()
            .and_then(|s| s.channels.get(name))
            .map(|c| c.connection.clone())
            .unwrap_or_default();
        rows.push(json!({
            "name": name, "plugin": channel.plugin, "workspace": channel.workspace,
            "connected": status.connected || !status.holds_connection,
            "since_ms": status.since_ms, "last_event_ms": status.last_event_ms,
            "reconnects": status.reconnects, "watchdog_reconnects": status.watchdog_reconnects,
            "last_error": status.last_error, "outbox": depth.get(name).copied().unwrap_or(0),
        }));
        for row in store.failed(name, 50)? {
            failed.push(json!({
                "id": row.id, "channel": row.channel, "conversation": row.conversation,
                "text": row.text, "attempts": row.attempts, "last_error": row.last_error,
            }));
        }
    }
    render(
        &console,
        "channels.html",
        page_context! {
            title => "Channels", csrf => session.csrf, channels => rows, failed,
            running => snapshot.is_some(),
        },
    )
}

async fn retry(
    State(console): Shared,
    Extension(session): Extension<WebSession>,
    Path(id): Path<i64>,
) -> Page {
    let store = console.ctx.channel_store()?;
    if !store.retry_failed(id, crate::db::now_ms())? {
        return Err(refused(format!(
            "outbox row #{id} is not a failed text reply (a file's bytes are dropped when it fails)"
        )));
    }
    console.audit.record(
        crate::audit::Actor::Web,
        None,
        crate::audit::Action::ChannelDeliveryRetried,
        &format!("outbox row #{id} queued again"),
    );
    done(
        &console,
        &session,
        &format!("outbox row #{id} is queued again"),
        "/channels",
    )
}
