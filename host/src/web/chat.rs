//! The console's chat: `POST /chat` runs a turn in the daemon, in a
//! workspace's `web` conversation; the turn's events gather in a feed that
//! `/chat` renders and `/chat/feed/{id}` streams over SSE as they come.
//! A call that needs a person shows inline with the same decisions as
//! Slack's buttons, decided through `operator::decide` like `/approvals`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use axum::extract::{Extension, Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use pincer_runner_protocol::TurnEvent;
use serde::Deserialize;
use serde_json::{Value, json};

use super::pages::{Page, PageError, refused, render, shown_message};
use super::{Console, WebSession};
use crate::sessions::{SessionFilter, SessionKey};
use crate::turn::{AgentEvent, HostEvent, Inbound, Presence, TurnError, TurnSummary};

/// The channel name of the console's conversations (reserved in config).
pub const WEB_CHANNEL: &str = "web";
/// The one conversation per workspace the console talks in.
const CONVERSATION: &str = "operator";
/// Finished feeds kept for a stream that connects late.
const KEPT_FEEDS: usize = 16;
/// How much of a tool's output a card shows (the session page has all).
const SHOWN_OUTPUT_BYTES: usize = 4096;
/// Turns shown above the feed.
const HISTORY_TURNS: usize = 20;

pub fn routes() -> axum::Router<Arc<Console>> {
    use axum::routing::{get, post};
    axum::Router::new()
        .route("/chat", get(page).post(send))
        .route("/chat/feed/{id}", get(stream))
        .route("/chat/{id}/stop", post(stop))
}

/// The turns the console started, newest last.
#[derive(Default)]
pub struct Feeds(Mutex<VecDeque<Arc<Feed>>>);

/// One turn's events as the page shows them: items that grow (streamed
/// text, a tool card that gets its result, an approval that gets decided),
/// each stamped with the version that last changed it.
pub struct Feed {
    id: String,
    workspace: String,
    state: Mutex<FeedState>,
    changed: tokio::sync::watch::Sender<u64>,
    cancel: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct FeedState {
    items: Vec<Item>,
    version: u64,
    done: bool,
    turn_id: Option<String>,
}

struct Item {
    version: u64,
    value: Value,
}

impl Feeds {
    /// A new feed for a turn in `workspace`; refused while one runs there.
    fn start(&self, workspace: &str, text: &str) -> Result<Arc<Feed>, PageError> {
        let mut feeds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if feeds.iter().any(|f| f.workspace == workspace && !f.done()) {
            return Err(PageError::new(
                StatusCode::CONFLICT,
                format!(
                    "a turn is still running in workspace `{workspace}`; wait for it or stop it first"
                ),
            ));
        }
        let feed = Arc::new(Feed {
            id: uuid::Uuid::new_v4().simple().to_string(),
            workspace: workspace.to_owned(),
            state: Mutex::new(FeedState::default()),
            changed: tokio::sync::watch::channel(0).0,
            cancel: tokio::sync::watch::channel(false).0,
        });
        feed.push(json!({"kind": "you", "text": text}));
        feeds.push_back(feed.clone());
        while feeds.len() > KEPT_FEEDS {
            match feeds.iter().position(|f| f.done()) {
                Some(oldest) => drop(feeds.remove(oldest)),
                None => break,
            }
        }
        Ok(feed)
    }

    fn get(&self, id: &str) -> Option<Arc<Feed>> {
        let feeds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        feeds.iter().find(|f| f.id == id).cloned()
    }

    /// The turn running in `workspace`, if any.
    fn running(&self, workspace: &str) -> Option<Arc<Feed>> {
        let feeds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        feeds
            .iter()
            .rev()
            .find(|f| f.workspace == workspace && !f.done())
            .cloned()
    }
}

impl Feed {
    fn lock(&self) -> std::sync::MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn done(&self) -> bool {
        self.lock().done
    }

    fn turn_id(&self) -> Option<String> {
        self.lock().turn_id.clone()
    }

    fn push(&self, value: Value) {
        self.change(|state| {
            let version = state.version;
            state.items.push(Item { version, value });
        });
    }

    /// Applies `edit` under the lock and wakes the streams.
    fn change(&self, edit: impl FnOnce(&mut FeedState)) {
        let version = {
            let mut state = self.lock();
            state.version += 1;
            edit(&mut state);
            state.version
        };
        self.changed.send_replace(version);
    }

    /// The item of `kind` whose `key` is `id`, changed by `edit`.
    fn update(&self, kind: &str, key: &str, id: &str, edit: impl FnOnce(&mut Value)) {
        self.change(|state| {
            let version = state.version;
            if let Some(item) = state
                .items
                .iter_mut()
                .rev()
                .find(|i| i.value["kind"] == kind && i.value[key] == id)
            {
                edit(&mut item.value);
                item.version = version;
            }
        });
    }

    fn apply(&self, event: &AgentEvent) {
        match event {
            AgentEvent::Host(HostEvent::Session { turn_id, .. }) => {
                self.lock().turn_id = Some(turn_id.clone());
            }
            AgentEvent::Turn(TurnEvent::TextDelta { text }) => self.change(|state| {
                let version = state.version;
                match state.items.last_mut() {
                    Some(item) if item.value["kind"] == "text" => {
                        let mut grown = item.value["text"].as_str().unwrap_or("").to_owned();
                        grown.push_str(text);
                        item.value["text"] = grown.into();
                        item.version = version;
                    }
                    _ => state.items.push(Item {
                        version,
                        value: json!({"kind": "text", "text": text}),
                    }),
                }
            }),
            AgentEvent::Turn(TurnEvent::ToolStart {
                call_id,
                name,
                arguments,
            }) => self.push(json!({
                "kind": "tool", "call_id": call_id, "name": name, "arguments": arguments,
                "ok": null, "output": null,
            })),
            AgentEvent::Turn(TurnEvent::ToolEnd {
                call_id,
                ok,
                output_bytes,
                truncated,
                duration_ms,
                ..
            }) => self.update("tool", "call_id", call_id, |item| {
                item["ok"] = (*ok).into();
                item["output_bytes"] = (*output_bytes).into();
                item["truncated"] = (*truncated).into();
                item["duration_ms"] = (*duration_ms).into();
            }),
            AgentEvent::Turn(TurnEvent::Message { message }) if message["role"] == "tool" => {
                let call = message["tool_call_id"].as_str().unwrap_or("");
                let shown = shown_message(message);
                let output = capped(shown["text"].as_str().unwrap_or(""));
                self.update("tool", "call_id", call, |item| {
                    item["output"] = output.into()
                });
            }
            AgentEvent::Turn(TurnEvent::Notice { message }) => {
                self.push(json!({"kind": "notice", "text": message}));
            }
            AgentEvent::Host(HostEvent::Container {
                name,
                started: true,
                ready_ms,
                ..
            }) => self.push(json!({
                "kind": "notice",
                "text": format!("started container {name} in {ready_ms} ms"),
            })),
            AgentEvent::Host(HostEvent::Approval {
                request,
                tool,
                preview,
                approvers,
                session,
                expires_ms,
            }) => self.push(json!({
                "kind": "approval", "request": request, "tool": tool, "preview": preview,
                "approvers": approvers, "session": session, "expires_ms": expires_ms,
                "outcome": null, "back": chat_url(&self.workspace, Some(&self.id)),
            })),
            AgentEvent::Host(HostEvent::Decided {
                request, outcome, ..
            }) => self.update("approval", "request", request, |item| {
                item["outcome"] = outcome.clone().into();
            }),
            AgentEvent::Turn(TurnEvent::Done { reply, .. }) => {
                let streamed = self.lock().items.iter().any(|i| i.value["kind"] == "text");
                if !streamed && !reply.is_empty() {
                    self.push(json!({"kind": "text", "text": reply}));
                }
            }
            _ => {}
        }
    }

    /// Ends the feed with how the turn went.
    fn finish(&self, result: Result<TurnSummary, TurnError>) {
        let end = match result {
            Ok(summary) => json!({
                "kind": "end",
                "status": summary.status,
                "error": summary.error,
                "session": summary.session_id,
            }),
            Err(e) => json!({"kind": "end", "status": "error", "error": e.to_string()}),
        };
        self.push(end);
        self.change(|state| state.done = true);
    }

    /// Items changed after version `seen`, with their index, and the
    /// version they bring the reader to.
    fn since(&self, seen: u64) -> (Vec<(usize, Value)>, u64, bool) {
        let state = self.lock();
        let changed = state
            .items
            .iter()
            .enumerate()
            .filter(|(_, item)| item.version > seen)
            .map(|(i, item)| (i, item.value.clone()))
            .collect();
        (changed, state.version, state.done)
    }
}

/// At most [`SHOWN_OUTPUT_BYTES`] of `text`, cut at a character.
fn capped(text: &str) -> String {
    if text.len() <= SHOWN_OUTPUT_BYTES {
        return text.to_owned();
    }
    let end = text.floor_char_boundary(SHOWN_OUTPUT_BYTES);
    format!(
        "{}\n… ({} bytes more on the session page)",
        &text[..end],
        text.len() - end
    )
}

#[derive(Deserialize, Default)]
struct ChatQuery {
    workspace: Option<String>,
    /// The turn just sent: shown even when it already ended (say, with
    /// an error before it reached the model).
    feed: Option<String>,
}

async fn page(
    State(console): State<Arc<Console>>,
    Extension(session): Extension<WebSession>,
    Query(q): Query<ChatQuery>,
) -> Page {
    let workspaces: Vec<&String> = console.ctx.config.workspaces.keys().collect();
    let workspace = match q.workspace {
        Some(name) if console.ctx.config.workspaces.contains_key(&name) => name,
        Some(name) => {
            return Err(PageError::new(
                StatusCode::NOT_FOUND,
                format!("no workspace named `{name}`"),
            ));
        }
        None => match workspaces.first() {
            Some(first) => (*first).clone(),
            None => return Err(refused("no workspace is configured")),
        },
    };
    let shown = q
        .feed
        .and_then(|id| console.chat.get(&id))
        .filter(|f| f.workspace == workspace)
        .or_else(|| console.chat.running(&workspace));
    let shown_turn = shown.as_ref().and_then(|f| f.turn_id());
    let history = history(&console, &workspace, shown_turn.as_deref())?;
    let (items, feed) = match &shown {
        Some(f) => {
            let (items, version, done) = f.since(0);
            let feed = json!({
                "id": f.id,
                "live": !done,
                "stream": format!("/chat/feed/{}?seen={version}", f.id),
            });
            (items, Some(feed))
        }
        None => (Vec::new(), None),
    };
    let items: Vec<Value> = items.into_iter().map(|(i, v)| item_context(i, v)).collect();
    render(
        &console,
        "chat.html",
        json!({
            "title": "Chat", "csrf": session.csrf, "workspace": workspace,
            "workspaces": workspaces, "history": history, "feed": feed, "items": items,
        }),
    )
}

/// The last turns of the workspace's open web session, without the one
/// the feed shows.
fn history(
    console: &Console,
    workspace: &str,
    live_turn: Option<&str>,
) -> Result<Vec<Value>, PageError> {
    let store = console.agent.sessions();
    let open = store
        .list(&SessionFilter {
            workspace: Some(workspace.to_owned()),
            channel: Some(WEB_CHANNEL.to_owned()),
            limit: 1,
            ..SessionFilter::default()
        })?
        .into_iter()
        .find(|s| s.closed_ms.is_none() && s.key.conversation == CONVERSATION);
    let Some(open) = open else {
        return Ok(Vec::new());
    };
    let messages = store.messages(open.id)?;
    let mut turns: Vec<&str> = Vec::new();
    for m in &messages {
        if Some(m.turn_id.as_str()) != live_turn && turns.last() != Some(&m.turn_id.as_str()) {
            turns.push(&m.turn_id);
        }
    }
    let keep: Vec<&str> = turns.iter().rev().take(HISTORY_TURNS).copied().collect();
    Ok(messages
        .iter()
        .filter(|m| keep.contains(&m.turn_id.as_str()))
        .map(|m| shown_message(&m.message))
        .filter(|m| m["text"] != "" || m["calls"].as_array().is_some_and(|c| !c.is_empty()))
        .collect())
}

fn item_context(index: usize, mut value: Value) -> Value {
    value["index"] = index.into();
    value
}

#[derive(Deserialize)]
struct SendForm {
    workspace: String,
    text: String,
}

async fn send(
    State(console): State<Arc<Console>>,
    Extension(_session): Extension<WebSession>,
    Form(form): Form<SendForm>,
) -> Result<Response, PageError> {
    let workspace = form.workspace;
    if !console.ctx.config.workspaces.contains_key(&workspace) {
        return Err(PageError::new(
            StatusCode::NOT_FOUND,
            format!("no workspace named `{workspace}`"),
        ));
    }
    let text = form.text.trim().to_owned();
    if text.is_empty() {
        return Err(refused("the message is empty"));
    }
    if text.len() > crate::config::MAX_MESSAGE_BYTES {
        return Err(refused(format!(
            "the message is {} bytes; the limit is {} KiB",
            text.len(),
            crate::config::MAX_MESSAGE_BYTES / 1024
        )));
    }
    let feed = console.chat.start(&workspace, &text)?;
    let id = feed.id.clone();
    let agent = console.agent.clone();
    let inbound = Inbound {
        key: SessionKey {
            channel: WEB_CHANNEL.into(),
            conversation: CONVERSATION.into(),
            workspace: workspace.clone(),
        },
        text,
        origin: None,
        presence: Presence::Person,
        quoted: None,
        images: Vec::new(),
    };
    tokio::spawn(async move {
        let shown = feed.clone();
        let events = move |event: AgentEvent| shown.apply(&event);
        let mut cancel = feed.cancel.subscribe();
        let result = agent
            .turn(inbound, &events, async move {
                let _ = cancel.wait_for(|stop| *stop).await;
            })
            .await;
        feed.finish(result);
    });
    Ok(Redirect::to(&chat_url(&workspace, Some(&id))).into_response())
}

fn chat_url(workspace: &str, feed: Option<&str>) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.append_pair("workspace", workspace);
    if let Some(feed) = feed {
        query.append_pair("feed", feed);
    }
    format!("/chat?{}", query.finish())
}

async fn stop(
    State(console): State<Arc<Console>>,
    Extension(_session): Extension<WebSession>,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let feed = console
        .chat
        .get(&id)
        .ok_or_else(|| PageError::new(StatusCode::NOT_FOUND, format!("no chat turn `{id}`")))?;
    feed.cancel.send_replace(true);
    Ok(Redirect::to(&chat_url(&feed.workspace, Some(&feed.id))).into_response())
}

#[derive(Deserialize, Default)]
struct FeedQuery {
    #[serde(default)]
    seen: u64,
}

/// `/chat/feed/{id}`: the feed's items changed after `seen`, each as an
/// `item` event carrying its index and its HTML (rendered by the same
/// template as the page, so escaped the same way), then `end`.
async fn stream(
    State(console): State<Arc<Console>>,
    Extension(session): Extension<WebSession>,
    Path(id): Path<String>,
    Query(q): Query<FeedQuery>,
) -> Response {
    let Some(feed) = console.chat.get(&id) else {
        return (StatusCode::NOT_FOUND, "no such chat turn\n").into_response();
    };
    let Some(held) = console.streams.hold(&session.id) else {
        return super::live::too_many_streams();
    };
    struct Reader {
        console: Arc<Console>,
        feed: Arc<Feed>,
        csrf: String,
        seen: u64,
        ready: VecDeque<Event>,
        ended: bool,
        changed: tokio::sync::watch::Receiver<u64>,
        _held: super::live::Held,
    }
    let reader = Reader {
        changed: feed.changed.subscribe(),
        console,
        feed,
        csrf: session.csrf.clone(),
        seen: q.seen,
        ready: VecDeque::new(),
        ended: false,
        _held: held,
    };
    let events = futures_util::stream::unfold(reader, |mut r| async move {
        loop {
            if let Some(event) = r.ready.pop_front() {
                return Some((Ok::<_, Infallible>(event), r));
            }
            if r.ended {
                return None;
            }
            r.changed.borrow_and_update();
            let (items, version, done) = r.feed.since(r.seen);
            r.seen = version;
            for (index, value) in items {
                let html = r.console.templates.render(
                    "chat_item.html",
                    json!({"item": item_context(index, value), "csrf": r.csrf}),
                );
                match html {
                    Ok(html) => r.ready.push_back(
                        Event::default()
                            .event("item")
                            .data(json!({"index": index, "html": html}).to_string()),
                    ),
                    Err(e) => tracing::warn!("chat feed: {e}"),
                }
            }
            if done {
                r.ready.push_back(Event::default().event("end").data(""));
                r.ended = true;
                continue;
            }
            if !r.ready.is_empty() {
                continue;
            }
            let mut stop = r.console.stop.clone();
            tokio::select! {
                changed = r.changed.changed() => if changed.is_err() { return None },
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(super::live::KEEPALIVE))
        .into_response()
}
