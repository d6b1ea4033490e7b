//! Channel `channel-slack`: Slack as a pincer channel.
//!
//! Messages arrive over Socket Mode (when `app_token` is set: the host holds
//! the websocket `connect` describes and hands its frames to `on_frame`) or
//! through the Events API (signed webhooks to `/events`, verified with
//! `signing_secret`). Replies go out by `chat.postMessage`, converted from
//! Markdown to Slack's mrkdwn; a reaction shows that a turn is working.
//!
//! The tokens and the signing secret are manifest secrets: the plugin names
//! them in requests (`secret-use`) and verifications (`secrets::verify`) and
//! never sees their values. Everything that does not call the host lives in
//! pure functions, unit-tested natively.

mod api;
mod files;
mod history;
mod inbound;
mod interactive;
mod mrkdwn;
mod progress;
mod signature;
mod socket;

use api::Failure;
use pincer_plugin_sdk::channel::{
    ChannelError, ChannelInfo, CheckItem, ConnectionRequest, Delivery, Frame, FrameOutcome, Guest,
    HistoryRequest, OutboundFile, PastMessage, ReconnectPolicy, RetryAfter, StatusUpdate,
    TurnState, WebhookOutcome, WebhookRequest,
};
use pincer_plugin_sdk::log as logging;
use pincer_plugin_sdk::secrets::{self, Digest, Part, SecretError};
use pincer_plugin_sdk::types::{
    Attachment, Header, HttpError, HttpRequest, HttpResponse, Outbound, SecretHeader, SecretPlace,
    SecretUse,
};
use pincer_plugin_sdk::{clock, config, http, upload};
use serde_json::{Value, json};

const BOT_TOKEN: &str = "bot_token";
const APP_TOKEN: &str = "app_token";
const SIGNING_SECRET: &str = "signing_secret";
const DEFAULT_API_BASE: &str = "https://slack.com/api";
const DEFAULT_REACTION: &str = "eyes";

/// Slack recommends at most 4,000 characters per message; escaping (`&amp;`)
/// and mrkdwn markers need some headroom.
const MAX_TEXT_BYTES: u32 = 3500;
/// Slack pings Socket Mode connections regularly; silence this long means the
/// connection is dead.
const IDLE_TIMEOUT_MS: u32 = 30_000;
/// The largest file sent: Slack takes up to 1 GB, pincer holds the file
/// in memory while it goes out.
const MAX_UPLOAD_BYTES: u64 = 100 << 20;
/// The time an upload of the bytes may take.
const UPLOAD_TIMEOUT_MS: u32 = 30_000;
/// Per-request timeout for Web API calls.
const HTTP_TIMEOUT_MS: u32 = 15_000;

/// Bot scopes the channel uses: reading DMs and mentions, replying, reacting.
const NEEDED_SCOPES: [&str; 5] = [
    "app_mentions:read",
    "chat:write",
    "im:history",
    "im:read",
    "reactions:write",
];

/// Scopes for what a team may leave out, and what goes without them.
const OPTIONAL_SCOPES: [(&str, &str); 4] = [
    ("channels:history", "no thread context in channels"),
    ("groups:history", "no thread context in private channels"),
    ("files:read", "files people send are not fetched"),
    ("files:write", "the agent cannot send files"),
];

const CONNECTION_TOKEN_ERRORS: [&str; 3] = ["invalid_auth", "not_authed", "not_allowed_token_type"];

struct SlackChannel;

impl Guest for SlackChannel {
    fn describe() -> ChannelInfo {
        ChannelInfo {
            max_text_bytes: MAX_TEXT_BYTES,
            interactive: true,
            max_upload_bytes: MAX_UPLOAD_BYTES,
        }
    }

    fn history(request: HistoryRequest) -> Result<Vec<PastMessage>, ChannelError> {
        require_bot_token()?;
        let own_bot = call_json(BOT_TOKEN, "auth.test", &json!({}))
            .ok()
            .and_then(|v| v.get("bot_id").and_then(Value::as_str).map(str::to_string));
        let (method, fields) = history::call(&request);
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let answer = call(
            BOT_TOKEN,
            method,
            "application/x-www-form-urlencoded",
            body.into_bytes(),
        )
        .map_err(ChannelError::from)?;
        Ok(history::messages(&answer, &request, own_bot.as_deref()))
    }

    fn file_request(_message_id: String, file: Attachment) -> Result<HttpRequest, ChannelError> {
        require_bot_token()?;
        let base = config::get("files_base")
            .map(|b| b.trim().trim_end_matches('/').to_string())
            .filter(|b| !b.is_empty())
            .unwrap_or_else(|| files::DEFAULT_FILES_BASE.to_string());
        let url = files::download_url(&file.locator, &base).map_err(ChannelError::Rejected)?;
        Ok(HttpRequest {
            method: "GET".into(),
            url,
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: Some(UPLOAD_TIMEOUT_MS),
            secrets: vec![bearer(BOT_TOKEN)],
            capture: None,
        })
    }

    fn send_file(file: OutboundFile) -> Result<Delivery, ChannelError> {
        require_bot_token()?;
        let asked = call(
            BOT_TOKEN,
            "files.getUploadURLExternal",
            "application/x-www-form-urlencoded",
            files::upload_url_form(&file.name, file.size).into_bytes(),
        )?;
        let (Some(upload_url), Some(file_id)) =
            (asked["upload_url"].as_str(), asked["file_id"].as_str())
        else {
            return Err(ChannelError::Upstream(
                "files.getUploadURLExternal answered without upload_url and file_id".into(),
            ));
        };
        let sent = upload::send(
            &HttpRequest {
                method: "POST".into(),
                url: upload_url.to_string(),
                headers: vec![header("content-type", "application/octet-stream")],
                body: Vec::new(),
                timeout_ms: Some(UPLOAD_TIMEOUT_MS),
                secrets: Vec::new(),
                capture: None,
            },
            &upload::Body::Raw,
        )
        .map_err(|err| http_error("the upload", upload_url, err))?;
        if sent.status == 429 {
            return Err(ChannelError::RetryLater(RetryAfter {
                after_ms: api::retry_after_ms(header_value(&sent.headers, "retry-after")),
                reason: "Slack rate-limited the upload (HTTP 429)".into(),
            }));
        }
        if !(200..300).contains(&sent.status) {
            return Err(ChannelError::Upstream(format!(
                "Slack answered the upload with HTTP {}: {}",
                sent.status,
                api::snippet(&sent.body)
            )));
        }
        let comment = file.comment.as_deref().map(mrkdwn::to_mrkdwn);
        let body = files::complete_body(
            file_id,
            &file.name,
            &file.conversation,
            file.thread.as_deref(),
            comment.as_deref(),
        );
        call_json(BOT_TOKEN, "files.completeUploadExternal", &body)?;
        Ok(Delivery {
            id: file_id.to_string(),
        })
    }

    fn handle_webhook(request: WebhookRequest) -> Result<WebhookOutcome, ChannelError> {
        if let Some(outcome) = route(&request.method, &request.path) {
            return Ok(outcome);
        }
        if !secrets::is_set(SIGNING_SECRET) {
            return Err(no_signing_secret());
        }
        let now_ms = clock::now_ms();
        let check = signature::prepare(
            header_value(&request.headers, signature::TIMESTAMP_HEADER),
            header_value(&request.headers, signature::SIGNATURE_HEADER),
            now_ms,
        )
        .map_err(ChannelError::Unauthorized)?;
        let parts = [Part::Bytes(check.prefix), Part::Bytes(request.body.clone())];
        match secrets::verify(
            Digest::HmacSha256,
            Some(SIGNING_SECRET),
            &parts,
            &check.expected,
        ) {
            Ok(true) => {}
            Ok(false) => {
                return Err(ChannelError::Unauthorized(
                    "X-Slack-Signature does not match: the request is not from Slack, or \
                     `signing_secret` is not this app's Signing Secret"
                        .into(),
                ));
            }
            Err(SecretError::Unknown(_)) => return Err(no_signing_secret()),
            Err(SecretError::Denied(why)) => {
                return Err(ChannelError::Unsupported(format!(
                    "the host refused the signing secret: {why}"
                )));
            }
            Err(SecretError::Invalid(why)) => {
                return Err(ChannelError::Unauthorized(format!(
                    "the signature cannot be checked: {why}"
                )));
            }
        }
        let (outcome, notes) = match bare_path(&request.path) {
            INTERACTIVE_PATH => interactivity_outcome(&request.body, now_ms)?,
            COMMANDS_PATH => command_outcome(&request.body, now_ms)?,
            _ => events_outcome(&request.body, now_ms)?,
        };
        for note in notes {
            log(logging::Level::Debug, &note);
        }
        Ok(outcome)
    }

    fn connect() -> Result<Option<ConnectionRequest>, ChannelError> {
        if !secrets::is_set(APP_TOKEN) {
            log(
                logging::Level::Info,
                "no `app_token`: Socket Mode is off, messages arrive through the Events API",
            );
            return Ok(None);
        }
        let value = call(
            APP_TOKEN,
            "apps.connections.open",
            "application/x-www-form-urlencoded",
            Vec::new(),
        )
        .map_err(|err| err.into_connect_error())?;
        let url = connection_url(&value).map_err(ChannelError::Upstream)?;
        Ok(Some(connection_request(url)))
    }

    fn on_frame(frame: Frame) -> Result<FrameOutcome, ChannelError> {
        let text = match frame {
            Frame::Text(text) => text,
            Frame::Binary(bytes) => {
                return Err(ChannelError::BadRequest(format!(
                    "Socket Mode sends text frames; got a binary frame of {} bytes",
                    bytes.len()
                )));
            }
        };
        let outcome = socket::frame(&text, clock::now_ms()).map_err(ChannelError::BadRequest)?;
        for (level, line) in &outcome.logs {
            log(
                match level {
                    socket::Level::Debug => logging::Level::Debug,
                    socket::Level::Info => logging::Level::Info,
                    socket::Level::Warn => logging::Level::Warn,
                    socket::Level::Error => logging::Level::Error,
                },
                line,
            );
        }
        Ok(frame_outcome(outcome))
    }

    fn send(message: Outbound) -> Result<Delivery, ChannelError> {
        require_bot_token()?;
        let body = post_message_body(&message, config::get("unfurl").as_deref() == Some("true"));
        let method = if message.visible_to.is_some() {
            "chat.postEphemeral"
        } else {
            "chat.postMessage"
        };
        let value = call_json(BOT_TOKEN, method, &body).map_err(ChannelError::from)?;
        Ok(delivered(method, &value))
    }

    fn update(id: String, message: Outbound) -> Result<Delivery, ChannelError> {
        require_bot_token()?;
        let body = update_body(&id, &message);
        let value = call_json(BOT_TOKEN, "chat.update", &body).map_err(ChannelError::from)?;
        Ok(delivered("chat.update", &value))
    }

    fn check() -> Vec<CheckItem> {
        let item = |name: &str, ok: bool, detail: String| CheckItem {
            name: name.into(),
            ok,
            detail,
        };
        let mut items = Vec::new();
        match api_base() {
            Ok(base) => items.push(item("api_base", true, base)),
            Err(e) => {
                items.push(item("api_base", false, format!("{e:?}")));
                return items;
            }
        }
        if secrets::is_set(BOT_TOKEN) {
            items.push(check_bot_token());
        } else {
            items.push(item(
                "bot token",
                false,
                "`bot_token` is not set: give the app's Bot User OAuth Token (xoxb-…, on its OAuth & Permissions page)".into(),
            ));
        }
        let socket_mode = secrets::is_set(APP_TOKEN);
        if socket_mode {
            items.push(
                match call(
                    APP_TOKEN,
                    "apps.connections.open",
                    "application/x-www-form-urlencoded",
                    Vec::new(),
                ) {
                    Ok(_) => item(
                        "app-level token",
                        true,
                        "apps.connections.open answered: Socket Mode works".into(),
                    ),
                    Err(e) => item(
                        "app-level token",
                        false,
                        format!("{:?}", e.into_connect_error()),
                    ),
                },
            );
        } else {
            items.push(item(
                "app-level token",
                true,
                "not set: Socket Mode is off, messages arrive only through the Events API".into(),
            ));
        }
        let signed = secrets::is_set(SIGNING_SECRET);
        items.push(item(
            "signing secret",
            signed || socket_mode,
            if signed {
                "set: Events API requests are verified".into()
            } else if socket_mode {
                "not set: the Events API is refused (Socket Mode does not need it)".into()
            } else {
                "not set, and no app_token either: no message can arrive. Set `app_token` (Socket Mode) or `signing_secret` (Events API)".into()
            },
        ));
        items
    }

    fn status(update: StatusUpdate) -> Result<Option<String>, ChannelError> {
        let mut handle = progress::Handle::parse(update.handle.as_deref());
        // Slash commands have a trigger id, not a message to react to.
        if !inbound::is_ts(&update.message_id) {
            return Ok(None);
        }
        require_bot_token()?;
        match (update.state, update.detail.as_deref()) {
            (TurnState::Working, None) => {
                if let Some(name) = working_reaction(config::get("working_reaction")) {
                    let body = reaction_body(&update.conversation, &update.message_id, &name);
                    match call_json(BOT_TOKEN, "reactions.add", &body) {
                        Ok(_) => handle.reaction = Some(name),
                        Err(err) if err.error_code() == Some("already_reacted") => {
                            handle.reaction = Some(name)
                        }
                        Err(err) => return Err(err.into()),
                    }
                }
            }
            (TurnState::Working, Some(detail)) => show_detail(&update, &mut handle, detail)?,
            (TurnState::Done | TurnState::Failed, _) => {
                if let Some(added) = handle.reaction.take() {
                    let body = reaction_body(&update.conversation, &update.message_id, &added);
                    match call_json(BOT_TOKEN, "reactions.remove", &body) {
                        Ok(_) => {}
                        Err(err) if err.error_code() == Some("no_reaction") => {}
                        Err(err) => return Err(err.into()),
                    }
                }
                if handle.status {
                    set_assistant_status(&update, "")?;
                    handle.status = false;
                }
                if let Some(ts) = handle.line.take() {
                    let text = if update.state == TurnState::Done {
                        progress::FINISHED_LINE
                    } else {
                        progress::FAILED_LINE
                    };
                    let body = json!({ "channel": update.conversation, "ts": ts, "text": text });
                    call_json(BOT_TOKEN, "chat.update", &body).map_err(ChannelError::from)?;
                }
            }
        }
        Ok(handle.stored())
    }
}

/// Shows what the turn does now: the assistant status in an AI app's
/// thread, else the status line (posted once, then edited).
fn show_detail(
    update: &StatusUpdate,
    handle: &mut progress::Handle,
    detail: &str,
) -> Result<(), ChannelError> {
    if config::get("assistant").as_deref() == Some("true") {
        set_assistant_status(update, detail)?;
        handle.status = true;
        return Ok(());
    }
    let text = progress::line(detail);
    match &handle.line {
        Some(ts) => {
            let body = json!({ "channel": update.conversation, "ts": ts, "text": text });
            call_json(BOT_TOKEN, "chat.update", &body).map_err(ChannelError::from)?;
        }
        None => {
            let mut body = json!({ "channel": update.conversation, "text": text });
            if let Some(thread) = update.thread.as_deref().filter(|t| !t.is_empty()) {
                body["thread_ts"] = json!(thread);
            }
            let value =
                call_json(BOT_TOKEN, "chat.postMessage", &body).map_err(ChannelError::from)?;
            handle.line = delivery_id(&value);
        }
    }
    Ok(())
}

/// `assistant.threads.setStatus`; an empty status clears it.
fn set_assistant_status(update: &StatusUpdate, status: &str) -> Result<(), ChannelError> {
    let thread = update
        .thread
        .clone()
        .unwrap_or_else(|| update.message_id.clone());
    let body = json!({ "channel_id": update.conversation, "thread_ts": thread, "status": status });
    call_json(BOT_TOKEN, "assistant.threads.setStatus", &body)
        .map(drop)
        .map_err(ChannelError::from)
}

// ----- The thin layer over the host's imports.

fn log(level: logging::Level, line: &str) {
    logging::log(level, line);
}

fn require_bot_token() -> Result<(), ChannelError> {
    if secrets::is_set(BOT_TOKEN) {
        Ok(())
    } else {
        Err(ChannelError::Unsupported(
            "`bot_token` is not set: give the app's Bot User OAuth Token (xoxb-…)".into(),
        ))
    }
}

fn no_signing_secret() -> ChannelError {
    ChannelError::Unsupported(
        "the Events API needs `signing_secret` (the app's Signing Secret, on its Basic \
         Information page) to verify requests; set it, or use Socket Mode with `app_token`"
            .into(),
    )
}

fn api_base() -> Result<String, ChannelError> {
    parse_api_base(config::get("api_base")).map_err(ChannelError::Unsupported)
}

/// A failed Web API call.
enum CallError {
    /// Slack answered, and refused or failed.
    Slack(Failure),
    /// Slack could not be reached.
    Channel(ChannelError),
}

impl CallError {
    fn error_code(&self) -> Option<&str> {
        match self {
            CallError::Slack(failure) => failure.error_code(),
            CallError::Channel(_) => None,
        }
    }

    /// For `apps.connections.open`: a refused token is the app-level token's fault.
    fn into_connect_error(self) -> ChannelError {
        match self {
            CallError::Slack(failure) => connect_error(failure),
            CallError::Channel(err) => err,
        }
    }
}

impl From<CallError> for ChannelError {
    fn from(err: CallError) -> Self {
        match err {
            CallError::Slack(failure) => failure_error(failure),
            CallError::Channel(err) => err,
        }
    }
}

fn call_json(token: &str, method: &str, body: &Value) -> Result<Value, CallError> {
    call(
        token,
        method,
        "application/json; charset=utf-8",
        body.to_string().into_bytes(),
    )
}

/// POSTs to a Web API method, authorized with the secret `token`.
fn call(token: &str, method: &str, content_type: &str, body: Vec<u8>) -> Result<Value, CallError> {
    let url = format!("{}/{method}", api_base().map_err(CallError::Channel)?);
    let response = http::fetch(&HttpRequest {
        method: "POST".into(),
        url: url.clone(),
        headers: vec![header("content-type", content_type)],
        body,
        timeout_ms: Some(HTTP_TIMEOUT_MS),
        secrets: vec![bearer(token)],
        capture: None,
    })
    .map_err(|err| CallError::Channel(http_error(method, &url, err)))?;
    api::check(
        method,
        response.status,
        header_value(&response.headers, "retry-after"),
        &response.body,
    )
    .map_err(CallError::Slack)
}

/// `auth.test` with the bot token, and the scopes Slack says it has.
fn check_bot_token() -> CheckItem {
    let item = |ok: bool, detail: String| CheckItem {
        name: "bot token".into(),
        ok,
        detail,
    };
    let url = match api_base() {
        Ok(base) => format!("{base}/auth.test"),
        Err(e) => return item(false, format!("{e:?}")),
    };
    let response = match http::fetch(&HttpRequest {
        method: "POST".into(),
        url: url.clone(),
        headers: vec![header("content-type", "application/x-www-form-urlencoded")],
        body: Vec::new(),
        timeout_ms: Some(HTTP_TIMEOUT_MS),
        secrets: vec![bearer(BOT_TOKEN)],
        capture: None,
    }) {
        Ok(response) => response,
        Err(e) => return item(false, format!("{:?}", http_error("auth.test", &url, e))),
    };
    let scopes = header_value(&response.headers, "x-oauth-scopes").map(str::to_string);
    match api::check("auth.test", response.status, None, &response.body) {
        Err(failure) => item(false, format!("{:?}", failure_error(failure))),
        Ok(body) => {
            let who = format!(
                "auth.test: team {} ({}), bot user {}",
                body["team"].as_str().unwrap_or("?"),
                body["team_id"].as_str().unwrap_or("?"),
                body["user_id"].as_str().unwrap_or("?"),
            );
            match scopes {
                None => item(
                    true,
                    format!("{who}; Slack did not report the token's scopes"),
                ),
                Some(scopes) => {
                    let missing = missing_scopes(&scopes);
                    let granted: Vec<&str> = scopes.split(',').map(str::trim).collect();
                    let optional: Vec<String> = OPTIONAL_SCOPES
                        .iter()
                        .filter(|(scope, _)| !granted.contains(scope))
                        .map(|(scope, what)| format!("{scope} ({what})"))
                        .collect();
                    let optional = if optional.is_empty() {
                        String::new()
                    } else {
                        format!("; without {}", optional.join(", "))
                    };
                    if missing.is_empty() {
                        item(true, format!("{who}; scopes {scopes}{optional}"))
                    } else {
                        item(
                            false,
                            format!(
                                "{who}; missing scopes {} (add them under OAuth & Permissions and reinstall the app)",
                                missing.join(", ")
                            ),
                        )
                    }
                }
            }
        }
    }
}

pincer_plugin_sdk::export_channel!(SlackChannel);

/// The [`NEEDED_SCOPES`] not in Slack's comma-separated `x-oauth-scopes`.
fn missing_scopes(granted: &str) -> Vec<&'static str> {
    let granted: Vec<&str> = granted.split(',').map(str::trim).collect();
    NEEDED_SCOPES
        .into_iter()
        .filter(|s| !granted.contains(s))
        .collect()
}

// ----- Pure helpers.

fn bearer(secret: &str) -> SecretUse {
    SecretUse {
        secret: secret.into(),
        place: SecretPlace::Header(SecretHeader {
            name: "authorization".into(),
            prefix: "Bearer ".into(),
        }),
    }
}

fn header(name: &str, value: &str) -> Header {
    Header {
        name: name.into(),
        value: value.into(),
    }
}

fn header_value<'a>(headers: &'a [Header], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// `api_base` without a trailing slash; the default when unset or empty.
fn parse_api_base(value: Option<String>) -> Result<String, String> {
    let value = value.unwrap_or_default();
    let base = value.trim().trim_end_matches('/');
    if base.is_empty() {
        return Ok(DEFAULT_API_BASE.into());
    }
    if !(base.starts_with("https://") || base.starts_with("http://")) {
        return Err(format!(
            "`api_base` must be an http:// or https:// URL, got {base:?}"
        ));
    }
    Ok(base.into())
}

/// The reaction to show while working: the default when unset, none when
/// set to an empty string; colons (`:eyes:`) are dropped.
fn working_reaction(value: Option<String>) -> Option<String> {
    match value {
        None => Some(DEFAULT_REACTION.into()),
        Some(value) => {
            let name = value.trim().trim_matches(':').trim();
            (!name.is_empty()).then(|| name.to_string())
        }
    }
}

/// Where an HTTP request or response goes wrong before Slack's answer.
fn http_error(method: &str, url: &str, err: HttpError) -> ChannelError {
    match err {
        HttpError::Denied(why) => ChannelError::Unsupported(format!(
            "{method}: the host does not let this plugin reach {url} ({why}); `api_base` must be \
             on slack.com or allowed for the channel"
        )),
        HttpError::InvalidRequest(why) => ChannelError::Unsupported(format!(
            "{method}: the request to {url} is invalid ({why}); check `api_base`"
        )),
        HttpError::Transport(why) => {
            ChannelError::Upstream(format!("{method}: cannot reach Slack: {why}"))
        }
        HttpError::Timeout => {
            ChannelError::Upstream(format!("{method}: Slack did not answer in time"))
        }
        HttpError::TooLarge => {
            ChannelError::Upstream(format!("{method}: Slack's answer is too large"))
        }
    }
}

fn failure_error(failure: Failure) -> ChannelError {
    match failure {
        Failure::RetryLater { after_ms, reason } => {
            ChannelError::RetryLater(RetryAfter { after_ms, reason })
        }
        Failure::Upstream(message) => ChannelError::Upstream(message),
        Failure::Rejected { message, .. } => ChannelError::Rejected(message),
    }
}

fn connect_error(failure: Failure) -> ChannelError {
    match failure {
        Failure::Rejected { error, .. } if CONNECTION_TOKEN_ERRORS.contains(&error.as_str()) => {
            ChannelError::Unauthorized(format!(
                "Slack refused apps.connections.open: {error}; `app_token` must be an \
                 app-level token (xapp-…) with the connections:write scope, from the app's \
                 Basic Information page"
            ))
        }
        other => failure_error(other),
    }
}

/// The websocket URL of an `apps.connections.open` answer.
fn connection_url(value: &Value) -> Result<String, String> {
    match value.get("url").and_then(Value::as_str) {
        Some(url) if url.starts_with("wss://") || url.starts_with("ws://") => Ok(url.into()),
        Some(url) => Err(format!(
            "apps.connections.open answered a URL that is not ws:// or wss://: {url:?}"
        )),
        None => Err("apps.connections.open answered ok without a `url`".into()),
    }
}

fn connection_request(url: String) -> ConnectionRequest {
    ConnectionRequest {
        url,
        headers: Vec::new(),
        idle_timeout_ms: Some(IDLE_TIMEOUT_MS),
        keepalive: None,
        reconnect: Some(ReconnectPolicy {
            min_delay_ms: 1_000,
            max_delay_ms: 30_000,
            jitter_ms: 1_000,
            max_attempts: None,
        }),
    }
}

fn frame_outcome(outcome: socket::Outcome) -> FrameOutcome {
    FrameOutcome {
        replies: outcome.replies.into_iter().map(Frame::Text).collect(),
        messages: outcome.messages,
        interactions: outcome.interactions,
        reconnect: outcome.reconnect,
        keepalive: None,
        reconnect_policy: None,
    }
}

/// `unfurl`: whether Slack may fetch the links and media of the reply to
/// preview them. Off unless `unfurl: true`: a link the model wrote would
/// otherwise be fetched by Slack, a way out of a workspace that has none.
fn post_message_body(message: &Outbound, unfurl: bool) -> Value {
    let mut body = json!({
        "channel": message.conversation,
        "text": mrkdwn::to_mrkdwn(&message.text),
        "mrkdwn": true,
        "unfurl_links": unfurl,
        "unfurl_media": unfurl,
    });
    if let Some(thread) = message.thread.as_deref().filter(|t| !t.is_empty()) {
        body["thread_ts"] = json!(thread);
    }
    if !message.actions.is_empty() {
        body["blocks"] = interactive::blocks(&message.text, &message.actions);
    }
    if let Some(user) = &message.visible_to {
        body["user"] = json!(user);
    }
    body
}

/// `chat.update` of message `ts`: the new text, and blocks always, since
/// Slack keeps the old blocks (and their buttons) of an update without.
fn update_body(ts: &str, message: &Outbound) -> Value {
    json!({
        "channel": message.conversation,
        "ts": ts,
        "text": mrkdwn::to_mrkdwn(&message.text),
        "blocks": interactive::blocks(&message.text, &message.actions),
    })
}

/// The receipt of a posted message: `ts` (`message_ts` for an ephemeral
/// one).
fn delivered(method: &str, value: &Value) -> Delivery {
    match delivery_id(value) {
        Some(id) => Delivery { id },
        None => {
            log(
                logging::Level::Warn,
                &format!("{method} answered ok without a `ts`"),
            );
            Delivery { id: String::new() }
        }
    }
}

fn reaction_body(channel: &str, timestamp: &str, name: &str) -> Value {
    json!({ "channel": channel, "timestamp": timestamp, "name": name })
}

fn delivery_id(value: &Value) -> Option<String> {
    value
        .get("ts")
        .or_else(|| value.get("message_ts"))
        .and_then(Value::as_str)
        .filter(|ts| !ts.is_empty())
        .map(str::to_string)
}

fn bare_path(path: &str) -> &str {
    path.split('?').next().unwrap_or(path).trim_end_matches('/')
}

/// Whether `path` is the Interactivity Request URL (`<mount>/interactive`).
const EVENTS_PATH: &str = "/events";
const INTERACTIVE_PATH: &str = "/interactive";
/// The Request URL of the app's slash command (`/pincer`).
const COMMANDS_PATH: &str = "/commands";

/// The answer to a request outside `POST /events`, `/interactive` and
/// `/commands`, if it is one.
fn route(method: &str, path: &str) -> Option<WebhookOutcome> {
    if ![EVENTS_PATH, INTERACTIVE_PATH, COMMANDS_PATH].contains(&bare_path(path)) {
        return Some(webhook_reply(
            404,
            json!({ "ok": false, "error": "not found; Slack's Request URL is <mount>/events, its Interactivity Request URL <mount>/interactive, its slash command's Request URL <mount>/commands" }),
        ));
    }
    if !method.eq_ignore_ascii_case("POST") {
        let mut outcome = webhook_reply(405, json!({ "ok": false, "error": "method not allowed" }));
        outcome.response.headers.push(header("allow", "POST"));
        return Some(outcome);
    }
    None
}

fn webhook_reply(status: u16, body: Value) -> WebhookOutcome {
    WebhookOutcome {
        response: HttpResponse {
            status,
            headers: vec![header("content-type", "application/json")],
            body: body.to_string().into_bytes(),
        },
        messages: Vec::new(),
        interactions: Vec::new(),
    }
}

/// An empty 200: the request arrived.
fn acknowledged() -> WebhookOutcome {
    WebhookOutcome {
        response: HttpResponse {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
        },
        messages: Vec::new(),
        interactions: Vec::new(),
    }
}

/// A verified interactivity request: acknowledged with an empty 200 (Slack
/// wants it within 3 s; the host replaces the message afterwards).
fn interactivity_outcome(
    body: &[u8],
    now_ms: u64,
) -> Result<(WebhookOutcome, Vec<String>), ChannelError> {
    let payload = interactive::form_payload(body).map_err(ChannelError::BadRequest)?;
    let mut outcome = acknowledged();
    let mut notes = Vec::new();
    match interactive::clicks(&payload, now_ms) {
        Ok(clicks) => outcome.interactions = clicks,
        Err(why) => notes.push(why),
    }
    Ok((outcome, notes))
}

/// A verified slash command (a form-encoded POST to the command's Request
/// URL, https://docs.slack.dev/interactivity/implementing-slash-commands):
/// an empty 200 acknowledges it; the answer comes as a message.
fn command_outcome(
    body: &[u8],
    now_ms: u64,
) -> Result<(WebhookOutcome, Vec<String>), ChannelError> {
    let fields: serde_json::Map<String, Value> = form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect();
    let message = inbound::command_message(&Value::Object(fields), now_ms)
        .map_err(|why| ChannelError::BadRequest(format!("slash command: {why}")))?;
    let mut outcome = acknowledged();
    outcome.messages.push(message);
    Ok((outcome, Vec::new()))
}

/// A verified Events API request: the answer, its messages, and notes on
/// what was ignored.
fn events_outcome(body: &[u8], now_ms: u64) -> Result<(WebhookOutcome, Vec<String>), ChannelError> {
    let value: Value = serde_json::from_slice(body).map_err(|err| {
        ChannelError::BadRequest(format!("the Events API body is not JSON: {err}"))
    })?;
    let kind = value.get("type").and_then(Value::as_str).unwrap_or("");
    let empty = acknowledged;
    let mut notes = Vec::new();
    let outcome = match kind {
        "url_verification" => {
            let challenge = value
                .get("challenge")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ChannelError::BadRequest("url_verification without a `challenge`".into())
                })?;
            webhook_reply(200, json!({ "challenge": challenge }))
        }
        "event_callback" => {
            let callback: inbound::Callback = serde_json::from_value(value).map_err(|err| {
                ChannelError::BadRequest(format!("malformed event_callback: {err}"))
            })?;
            let mut outcome = empty();
            match callback.message(now_ms) {
                Ok(message) => outcome.messages.push(message),
                Err(skip) => notes.push(format!("event ignored: {skip}")),
            }
            outcome
        }
        other => {
            notes.push(format!("Events API request of type {other:?} ignored"));
            empty()
        }
    };
    Ok((outcome, notes))
}

#[cfg(test)]
mod tests {

    #[test]
    fn missing_scopes_are_named() {
        assert_eq!(
            missing_scopes("chat:write, im:history,im:read"),
            vec!["app_mentions:read", "reactions:write"]
        );
        assert!(
            missing_scopes(
                "app_mentions:read,chat:write,im:history,im:read,reactions:write,users:read"
            )
            .is_empty()
        );
    }

    use super::*;

    fn outbound(text: &str, thread: Option<&str>) -> Outbound {
        Outbound {
            conversation: "C123".into(),
            thread: thread.map(str::to_string),
            text: text.into(),
            reply_to: Some("1.2".into()),
            actions: Vec::new(),
            visible_to: None,
        }
    }

    #[test]
    fn describe_leaves_headroom() {
        assert_eq!(SlackChannel::describe().max_text_bytes, 3500);
        assert!(SlackChannel::describe().interactive);
    }

    #[test]
    fn buttons_ephemeral_messages_and_updates() {
        let mut message = outbound("run `ls`?", Some("1.1"));
        message.actions = vec![pincer_plugin_sdk::types::Action {
            id: "pincer-approval:apr_1:once".into(),
            label: "Approve once".into(),
            style: pincer_plugin_sdk::types::ActionStyle::Primary,
        }];
        let body = post_message_body(&message, false);
        assert_eq!(body["text"], "run `ls`?", "the notification text stays");
        assert_eq!(
            body["blocks"][1]["elements"][0]["action_id"],
            "pincer-approval:apr_1:once"
        );
        assert!(body.get("user").is_none());

        let mut only = outbound("only U1 can decide", Some("1.1"));
        only.visible_to = Some("U2".into());
        let body = post_message_body(&only, false);
        assert_eq!(body["user"], "U2");
        assert!(body.get("blocks").is_none());

        let body = update_body("1.5", &outbound("Approved once by U1.", None));
        assert_eq!(body["channel"], "C123");
        assert_eq!(body["ts"], "1.5");
        assert_eq!(
            body["blocks"].as_array().map(Vec::len),
            Some(1),
            "buttons gone"
        );
        assert_eq!(
            delivery_id(&json!({ "ok": true, "message_ts": "1.6" })).as_deref(),
            Some("1.6")
        );
    }

    #[test]
    fn post_message_bodies() {
        let body = post_message_body(&outbound("**hi** <there>", None), false);
        assert_eq!(
            body,
            json!({ "channel": "C123", "text": "*hi* &lt;there&gt;", "mrkdwn": true,
                    "unfurl_links": false, "unfurl_media": false })
        );
        let body = post_message_body(&outbound("x", None), true);
        assert_eq!(
            (&body["unfurl_links"], &body["unfurl_media"]),
            (&json!(true), &json!(true))
        );
        let body = post_message_body(&outbound("x", Some("1700000000.000100")), false);
        assert_eq!(body["thread_ts"], "1700000000.000100");
        let body = post_message_body(&outbound("x", Some("")), false);
        assert!(body.get("thread_ts").is_none());
    }

    #[test]
    fn send_errors_map_to_channel_errors() {
        let post = |status: u16, retry: Option<&str>, body: &str| {
            api::check("chat.postMessage", status, retry, body.as_bytes()).map_err(failure_error)
        };
        assert!(matches!(
            post(429, Some("7"), ""),
            Err(ChannelError::RetryLater(RetryAfter { after_ms: 7000, .. }))
        ));
        assert!(matches!(
            post(200, None, r#"{"ok":false,"error":"ratelimited"}"#),
            Err(ChannelError::RetryLater(RetryAfter { after_ms: 1000, .. }))
        ));
        assert!(matches!(
            post(503, None, ""),
            Err(ChannelError::Upstream(_))
        ));
        assert!(matches!(
            post(200, None, r#"{"ok":false,"error":"channel_not_found"}"#),
            Err(ChannelError::Rejected(m)) if m.contains("channel_not_found")
        ));
        assert!(matches!(
            post(200, None, r#"{"ok":false,"error":"missing_scope","needed":"chat:write"}"#),
            Err(ChannelError::Rejected(m)) if m.contains("chat:write")
        ));
        assert!(matches!(
            post(200, None, r#"{"ok":false,"error":"weird_new_thing"}"#),
            Err(ChannelError::Upstream(_))
        ));
        let ok = post(
            200,
            None,
            r#"{"ok":true,"channel":"C1","ts":"1503435956.000247"}"#,
        )
        .expect("ok");
        assert_eq!(delivery_id(&ok).as_deref(), Some("1503435956.000247"));
        assert_eq!(delivery_id(&json!({ "ok": true })), None);
    }

    #[test]
    fn transport_errors() {
        let url = "https://slack.com/api/chat.postMessage";
        assert!(matches!(
            http_error("chat.postMessage", url, HttpError::Timeout),
            ChannelError::Upstream(_)
        ));
        assert!(matches!(
            http_error("chat.postMessage", url, HttpError::Transport("reset".into())),
            ChannelError::Upstream(m) if m.contains("reset")
        ));
        assert!(matches!(
            http_error("chat.postMessage", url, HttpError::Denied("not allowed".into())),
            ChannelError::Unsupported(m) if m.contains("api_base")
        ));
    }

    #[test]
    fn connect_errors_blame_the_app_token() {
        let open = |status: u16, body: &str| {
            api::check("apps.connections.open", status, Some("12"), body.as_bytes())
                .map_err(connect_error)
        };
        for error in CONNECTION_TOKEN_ERRORS {
            match open(200, &format!(r#"{{"ok":false,"error":"{error}"}}"#)) {
                Err(ChannelError::Unauthorized(m)) => {
                    assert!(
                        m.contains(error) && m.contains("xapp-") && m.contains("connections:write"),
                        "{m}"
                    );
                }
                other => panic!("{error}: {other:?}"),
            }
        }
        assert!(matches!(
            open(429, ""),
            Err(ChannelError::RetryLater(RetryAfter {
                after_ms: 12_000,
                ..
            }))
        ));
        assert!(matches!(
            open(200, r#"{"ok":false,"error":"internal_error"}"#),
            Err(ChannelError::Upstream(_))
        ));
    }

    #[test]
    fn connection_requests() {
        // https://docs.slack.dev/reference/methods/apps.connections.open
        let value: Value = serde_json::from_str(
            r#"{ "ok": true, "url": "wss:\/\/wss.slack.com\/link\/?ticket=1234-5678" }"#,
        )
        .expect("json");
        let url = connection_url(&value).expect("url");
        assert_eq!(url, "wss://wss.slack.com/link/?ticket=1234-5678");
        let request = connection_request(url);
        assert_eq!(request.idle_timeout_ms, Some(30_000));
        assert!(request.keepalive.is_none());
        assert!(request.headers.is_empty());
        let policy = request.reconnect.expect("policy");
        assert_eq!(
            (
                policy.min_delay_ms,
                policy.max_delay_ms,
                policy.jitter_ms,
                policy.max_attempts
            ),
            (1_000, 30_000, 1_000, None)
        );
        assert!(connection_url(&json!({ "ok": true })).is_err());
        assert!(connection_url(&json!({ "ok": true, "url": "https://x" })).is_err());
        assert!(connection_url(&json!({ "ok": true, "url": 5 })).is_err());
    }

    #[test]
    fn frame_outcomes_leave_keepalive_alone() {
        let outcome = frame_outcome(socket::Outcome {
            replies: vec!["{}".into()],
            reconnect: true,
            ..Default::default()
        });
        assert!(outcome.reconnect);
        assert!(outcome.keepalive.is_none() && outcome.reconnect_policy.is_none());
        assert!(matches!(&outcome.replies[..], [Frame::Text(t)] if t == "{}"));
    }

    #[test]
    fn api_bases() {
        assert_eq!(parse_api_base(None).as_deref(), Ok(DEFAULT_API_BASE));
        assert_eq!(
            parse_api_base(Some(" ".into())).as_deref(),
            Ok(DEFAULT_API_BASE)
        );
        assert_eq!(
            parse_api_base(Some("http://127.0.0.1:9000/api/".into())).as_deref(),
            Ok("http://127.0.0.1:9000/api")
        );
        assert!(parse_api_base(Some("slack.com/api".into())).is_err());
    }

    #[test]
    fn working_reactions() {
        assert_eq!(working_reaction(None).as_deref(), Some("eyes"));
        assert_eq!(working_reaction(Some(String::new())), None);
        assert_eq!(working_reaction(Some("  ".into())), None);
        assert_eq!(
            working_reaction(Some(":hourglass:".into())).as_deref(),
            Some("hourglass")
        );
        assert_eq!(
            reaction_body("C1", "1.2", "eyes"),
            json!({ "channel": "C1", "timestamp": "1.2", "name": "eyes" })
        );
    }

    #[test]
    fn webhook_routes_without_host_calls() {
        let request = |method: &str, path: &str| WebhookRequest {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        let outcome = SlackChannel::handle_webhook(request("POST", "/other")).expect("404");
        assert_eq!(outcome.response.status, 404);
        assert!(outcome.messages.is_empty());
        let outcome = SlackChannel::handle_webhook(request("GET", "/events")).expect("405");
        assert_eq!(outcome.response.status, 405);
        assert_eq!(
            header_value(&outcome.response.headers, "Allow"),
            Some("POST")
        );
        assert!(route("post", "/events").is_none());
        assert!(route("POST", "/events/").is_none());
        assert!(route("POST", "/interactive").is_none());
        assert_eq!(
            route("GET", "/interactive").map(|o| o.response.status),
            Some(405)
        );
        assert!(matches!(
            SlackChannel::on_frame(Frame::Binary(vec![1, 2])),
            Err(ChannelError::BadRequest(_))
        ));
    }

    #[test]
    fn url_verification_from_slacks_docs() {
        // https://api.slack.com/events/url_verification
        let body = br#"{
            "token": "Jhj5dZrVaK7ZwHHjRyZWjbDl",
            "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P",
            "type": "url_verification"
        }"#;
        let (outcome, _) = events_outcome(body, 0).expect("challenge");
        assert_eq!(outcome.response.status, 200);
        let answer: Value = serde_json::from_slice(&outcome.response.body).expect("json");
        assert_eq!(
            answer,
            json!({ "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" })
        );
        assert!(outcome.messages.is_empty());
        assert!(events_outcome(br#"{"type":"url_verification"}"#, 0).is_err());
    }

    #[test]
    fn event_callbacks_over_http() {
        // https://api.slack.com/events/app_mention, with its envelope.
        let body = br#"{
            "token": "ZZZZZZWSxiZZZ2yIvs3peJ",
            "team_id": "T061EG9R6",
            "api_app_id": "A0MDYCDME",
            "event": {
                "type": "app_mention",
                "user": "W021FGA1Z",
                "text": "You can count on <@U0LAN0Z89> for an honorable mention.",
                "ts": "1515449483.000108",
                "channel": "C0LAN2Q65",
                "event_ts": "1515449483000108"
            },
            "type": "event_callback",
            "event_id": "Ev0MDYHUEL",
            "event_time": 1515449483000108,
            "authed_users": ["U0LAN0Z89"]
        }"#;
        let (outcome, notes) = events_outcome(body, 0).expect("callback");
        assert_eq!(outcome.response.status, 200);
        assert!(outcome.response.body.is_empty());
        assert!(notes.is_empty());
        let [message] = &outcome.messages[..] else {
            panic!("one message: {:?}", outcome.messages);
        };
        assert_eq!(message.text, "You can count on for an honorable mention.");
        assert_eq!(message.conversation, "C0LAN2Q65");
        assert_eq!(message.thread.as_deref(), Some("1515449483.000108"));
        assert_eq!(message.sender, "W021FGA1Z");

        // An edit: 200, nothing delivered.
        let body = br#"{"type":"event_callback","authed_users":["UB"],"event":{"type":"message","subtype":"message_changed","channel":"D1","channel_type":"im","ts":"1.1"}}"#;
        let (outcome, notes) = events_outcome(body, 0).expect("callback");
        assert_eq!(outcome.response.status, 200);
        assert!(outcome.messages.is_empty());
        assert_eq!(notes.len(), 1);

        // Other request types are answered 200 and ignored.
        let (outcome, _) = events_outcome(
            br#"{"type":"app_rate_limited","minute_rate_limited":1518467820}"#,
            0,
        )
        .expect("other");
        assert_eq!(outcome.response.status, 200);
        assert!(outcome.messages.is_empty());

        assert!(matches!(
            events_outcome(b"token=x&team_id=y", 0),
            Err(ChannelError::BadRequest(_))
        ));
        assert!(matches!(
            events_outcome(br#"{"type":"event_callback","authed_users":"nope"}"#, 0),
            Err(ChannelError::BadRequest(_))
        ));
    }
}
