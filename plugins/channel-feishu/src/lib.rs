//! Channel `channel-feishu`: Feishu (飞书) and Lark as a pincer channel.
//!
//! Messages arrive over Feishu's long connection (the host holds the
//! websocket `connect` describes and hands its binary protobuf frames to
//! `on_frame`) or as event webhooks to `/events` (signed and encrypted with
//! `encrypt_key`, or carrying `verification_token`). Replies go out as
//! rich-text posts built from the agent's Markdown; a reaction shows that a
//! turn is working.
//!
//! Secrets are used by name: `app_secret` is put into the token and endpoint
//! requests by the host, which also keeps the tenant access token it
//! captures (`tenant_token`) and forgets it shortly before it expires. Each
//! call runs on a fresh instance, so what must last (the bot's open_id, the
//! long connection's service id, parts of a split event) lives in `kv`.

mod api;
mod card;
mod event;
mod files;
mod frame;
mod history;
mod post;
mod webhook;
mod ws;

use api::Failure;
use pincer_plugin_sdk::channel::{
    ChannelError, ChannelInfo, CheckItem, ConnectionRequest, Delivery, Frame, FrameOutcome, Guest,
    HistoryRequest, Keepalive, OutboundFile, PastMessage, ReconnectPolicy, RetryAfter,
    StatusUpdate, TurnState, WebhookOutcome, WebhookRequest,
};
use pincer_plugin_sdk::log as logging;
use pincer_plugin_sdk::secrets::{self, Cipher, Digest, Part, SecretError};
use pincer_plugin_sdk::types::{
    Attachment, Capture, Header, HttpError, HttpRequest, HttpResponse, Message, Outbound,
    SecretHeader, SecretPlace, SecretUse,
};
use pincer_plugin_sdk::{clock, config, http, kv, upload};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const APP_SECRET: &str = "app_secret";
const ENCRYPT_KEY: &str = "encrypt_key";
const VERIFICATION_TOKEN: &str = "verification_token";
/// The captured tenant access token (not a config key).
const TENANT_TOKEN: &str = "tenant_token";

const FEISHU_BASE: &str = "https://open.feishu.cn";
const LARK_BASE: &str = "https://open.larksuite.com";
const DEFAULT_REACTION: &str = "Typing";

/// Feishu caps a post or card request at 30 KB and a text at 150 KB
/// ("发送消息 / Send message" limits). A post's JSON (element tags, styles,
/// escaping, and the content string escaped again inside the body) takes
/// two to three times the raw text, so 8000 bytes of Markdown stay well
/// under 30 KB, and a message that long is about as much as anyone reads
/// in one go.
const MAX_TEXT_BYTES: u32 = 8000;
const HTTP_TIMEOUT_MS: u32 = 15_000;
/// Per-request timeout for uploads and downloads of files.
const UPLOAD_TIMEOUT_MS: u32 = 30_000;
/// How long the parts of a split event wait for the rest (the SDK keeps
/// them 5 s).
const PART_TTL_MS: u64 = 10_000;
/// By when, from its start, `connect` gives up learning the bot's open_id:
/// the host gives each plugin call 5 s by default.
const BOT_ID_DEADLINE_MS: u64 = 4_000;

/// Delete-reaction's codes for a reaction or message that is gone (removed
/// by hand, message recalled): 231003 message not found, 231010 reaction not
/// on the message, 231011 invalid reaction_id (the API's error list,
/// https://open.feishu.cn/document/server-docs/im-v1/message-reaction/delete).
const REACTION_GONE: [i64; 3] = [231_003, 231_010, 231_011];

const KV_SERVICE_ID: &str = "ws/service_id";
const KV_BOT_OPEN_ID: &str = "bot/open_id";

struct FeishuChannel;

impl Guest for FeishuChannel {
    fn describe() -> ChannelInfo {
        ChannelInfo {
            max_text_bytes: MAX_TEXT_BYTES,
            interactive: true,
            max_upload_bytes: files::MAX_FILE_BYTES,
        }
    }

    /// A thread's messages (its root's `thread_id` when it has one, else
    /// the chat's page filtered to the root) or the chat's latest.
    fn history(request: HistoryRequest) -> Result<Vec<PastMessage>, ChannelError> {
        let bot = kv_string(KV_BOT_OPEN_ID);
        let (path, in_thread) = match request.thread.as_deref() {
            Some(thread) if thread.starts_with("omt_") => {
                (history::list_path("thread", thread, request.limit), None)
            }
            Some(root) => {
                let root_message = call("GET", &format!("/open-apis/im/v1/messages/{root}"), None)
                    .map_err(ChannelError::from)?;
                match history::thread_id_of(&root_message) {
                    Some(thread) => (history::list_path("thread", &thread, request.limit), None),
                    None => (
                        history::list_path("chat", &request.conversation, request.limit),
                        Some(root),
                    ),
                }
            }
            None => (
                history::list_path("chat", &request.conversation, request.limit),
                None,
            ),
        };
        let answer = call("GET", &path, None).map_err(ChannelError::from)?;
        let app_id = config::get("app_id");
        Ok(history::messages(
            &answer,
            &request,
            in_thread,
            bot.as_deref(),
            app_id.as_deref(),
        ))
    }

    fn file_request(message_id: String, file: Attachment) -> Result<HttpRequest, ChannelError> {
        let path =
            files::resource_path(&message_id, &file.locator).map_err(ChannelError::Rejected)?;
        ensure_token(HTTP_TIMEOUT_MS)?;
        Ok(HttpRequest {
            method: "GET".into(),
            url: format!("{}{path}", base()?),
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: Some(UPLOAD_TIMEOUT_MS),
            secrets: vec![tenant_bearer()],
            capture: None,
        })
    }

    /// Uploads the file and sends it as an `image` or `file` message; the
    /// comment follows as a post (a file message has no caption).
    fn send_file(file: OutboundFile) -> Result<Delivery, ChannelError> {
        let how = files::upload(&file.name, &file.media_type, file.size);
        let key = upload_file(&how)?;
        let content = json!({ how.key_field: key }).to_string();
        let message = Outbound {
            conversation: file.conversation.clone(),
            thread: file.thread.clone(),
            text: String::new(),
            reply_to: file.reply_to.clone(),
            actions: Vec::new(),
            visible_to: None,
        };
        let (path, body) = send_request(&message, how.msg_type, &content);
        let sent = call("POST", &path, Some(body)).map_err(ChannelError::from)?;
        let id = sent["data"]["message_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if let Some(comment) = file.comment.filter(|c| !c.trim().is_empty()) {
            let text = Outbound {
                text: comment,
                ..message
            };
            let content = post::post_content(&text.text).to_string();
            let (path, body) = send_request(&text, "post", &content);
            if let Err(e) = call("POST", &path, Some(body)) {
                log(
                    logging::Level::Warn,
                    &format!(
                        "the file went out; its comment did not: {}",
                        error_text(&e.into())
                    ),
                );
            }
        }
        Ok(Delivery { id })
    }

    /// Replaces a card the bot sent
    /// (https://open.feishu.cn/document/server-docs/im-v1/message-card/patch).
    fn update(id: String, message: Outbound) -> Result<Delivery, ChannelError> {
        if !id.starts_with("om_") {
            return Err(ChannelError::Rejected(format!(
                "`{id}` is not a Feishu message id (om_…)"
            )));
        }
        let content = card::card(&message.text, &message.actions).to_string();
        call(
            "PATCH",
            &format!("/open-apis/im/v1/messages/{id}"),
            Some(json!({ "content": content })),
        )
        .map_err(ChannelError::from)?;
        Ok(Delivery { id })
    }

    fn handle_webhook(request: WebhookRequest) -> Result<WebhookOutcome, ChannelError> {
        if let Some(outcome) = route(&request.method, &request.path) {
            return Ok(outcome);
        }
        let encrypted = secrets::is_set(ENCRYPT_KEY);
        let tokened = secrets::is_set(VERIFICATION_TOKEN);
        if !encrypted && !tokened {
            return Err(ChannelError::Unsupported(
                "webhooks need `encrypt_key` or `verification_token` (Events & Callbacks > \
                 Encryption Strategy) to tell Feishu's requests from forgeries; set one, or \
                 use the long connection"
                    .into(),
            ));
        }
        let signed = header_value(&request.headers, webhook::SIGNATURE_HEADER).is_some();
        if encrypted && signed {
            verify_signature(&request)?;
        }
        let body = plaintext(&request.body, encrypted)?;
        let envelope = event::envelope(&body).map_err(ChannelError::BadRequest)?;
        if envelope.kind.as_deref() == Some("url_verification") {
            check_token(envelope.token(), tokened)?;
            let challenge = envelope.challenge.clone().unwrap_or_default();
            return Ok(webhook_reply(200, json!({ "challenge": challenge })));
        }
        if encrypted && !signed {
            return Err(ChannelError::Unauthorized(format!(
                "no {} header: with an Encrypt Key, Feishu signs every event",
                webhook::SIGNATURE_HEADER
            )));
        }
        check_token(envelope.token(), tokened)?;
        if envelope.event_type() == card::ACTION_TRIGGER {
            let mut outcome = webhook_reply(200, card::received());
            outcome.interactions.extend(click_of(&envelope));
            return Ok(outcome);
        }
        let mut outcome = webhook_reply(200, json!({}));
        outcome.messages.extend(messages_of(&envelope));
        Ok(outcome)
    }

    fn connect() -> Result<Option<ConnectionRequest>, ChannelError> {
        let started = clock::now_ms();
        let base = base()?;
        if !long_connection(&base) {
            learn_bot_open_id(started + BOT_ID_DEADLINE_MS);
            log(
                logging::Level::Info,
                "webhook mode: events arrive at <mount>/events, no connection to open",
            );
            return Ok(None);
        }
        let app_id = app_id()?;
        let url = format!("{base}{}", ws::ENDPOINT_PATH);
        let response = http::fetch(&HttpRequest {
            method: "POST".into(),
            url: url.clone(),
            headers: vec![
                header("content-type", "application/json"),
                header("locale", "zh"),
            ],
            body: json!({ "AppID": app_id }).to_string().into_bytes(),
            timeout_ms: Some(HTTP_TIMEOUT_MS),
            secrets: vec![json_secret(APP_SECRET, "/AppSecret")],
            capture: None,
        })
        .map_err(|err| http_error("the long-connection endpoint", &url, err))?;
        if response.status != 200 {
            return Err(if response.status == 429 {
                ChannelError::RetryLater(RetryAfter {
                    after_ms: api::reset_ms(header_value(
                        &response.headers,
                        "x-ogw-ratelimit-reset",
                    )),
                    reason: "Feishu rate-limited the long-connection endpoint".into(),
                })
            } else {
                ChannelError::Upstream(format!(
                    "the long-connection endpoint answered HTTP {}: {}",
                    response.status,
                    api::snippet(&response.body)
                ))
            });
        }
        let endpoint = ws::endpoint(&response.body).map_err(|err| match err {
            ws::EndpointError::Server(why) => {
                ChannelError::Upstream(format!("the long-connection endpoint failed: {why}"))
            }
            ws::EndpointError::Client(code, msg) => ChannelError::Unauthorized(format!(
                "Feishu refused the long connection: code {code}: {msg}; check `app_id` and \
                 `app_secret`, and choose \"receive events through a persistent connection\" \
                 under Events & Callbacks"
            )),
        })?;
        kv_set(
            KV_SERVICE_ID,
            endpoint.service_id.to_string().as_bytes(),
            None,
        );
        // Learnt here, not when an event arrives: the event's ack must not
        // wait on Feishu's API (it is due within 3 s).
        learn_bot_open_id(started + BOT_ID_DEADLINE_MS);
        let timing = endpoint.config.timing();
        Ok(Some(ConnectionRequest {
            url: endpoint.url,
            headers: Vec::new(),
            idle_timeout_ms: Some(timing.idle_timeout_ms),
            keepalive: Some(keepalive(endpoint.service_id, &timing)),
            reconnect: Some(policy(&timing)),
        }))
    }

    fn on_frame(frame: Frame) -> Result<FrameOutcome, ChannelError> {
        let started = clock::now_ms();
        let bytes = match frame {
            Frame::Binary(bytes) => bytes,
            Frame::Text(text) => {
                return Err(ChannelError::BadRequest(format!(
                    "the long connection sends binary frames; got text of {} bytes",
                    text.len()
                )));
            }
        };
        let frame = frame::Frame::decode(&bytes).map_err(ChannelError::BadRequest)?;
        let mut outcome = FrameOutcome {
            replies: Vec::new(),
            messages: Vec::new(),
            interactions: Vec::new(),
            reconnect: false,
            keepalive: None,
            reconnect_policy: None,
        };
        let kind = frame.header("type").unwrap_or("").to_string();
        if frame.method == frame::METHOD_CONTROL {
            if kind == "pong"
                && let Some(config) = ws::pong_config(frame.payload.as_deref().unwrap_or(&[]))
            {
                let service = if frame.service != 0 {
                    frame.service
                } else {
                    stored_service_id().unwrap_or(0)
                };
                let timing = config.timing();
                outcome.keepalive = Some(keepalive(service, &timing));
                outcome.reconnect_policy = Some(policy(&timing));
            }
            return Ok(outcome);
        }
        if frame.method != frame::METHOD_DATA || kind != "event" {
            // Card callbacks and unknown types: the SDK neither handles nor
            // answers them.
            log(
                logging::Level::Debug,
                &format!("data frame of type {kind:?} ignored"),
            );
            return Ok(outcome);
        }
        let payload = match joined_payload(&frame)? {
            Some(payload) => payload,
            // More parts to come; the SDK answers only the whole event.
            None => return Ok(outcome),
        };
        let mut answer = None;
        let code = match event::envelope(&payload) {
            Ok(envelope) if envelope.event_type() == card::ACTION_TRIGGER => {
                outcome.interactions.extend(click_of(&envelope));
                answer = Some(card::received().to_string());
                200
            }
            Ok(envelope) => {
                outcome.messages.extend(messages_of(&envelope));
                200
            }
            Err(why) => {
                log(logging::Level::Warn, &format!("long connection: {why}"));
                500
            }
        };
        let elapsed = clock::now_ms().saturating_sub(started);
        outcome.replies.push(Frame::Binary(
            frame::response(frame, code, elapsed, answer.as_deref().map(str::as_bytes)).encode(),
        ));
        Ok(outcome)
    }

    fn send(message: Outbound) -> Result<Delivery, ChannelError> {
        let (path, body) = if message.visible_to.is_some() {
            ephemeral_request(&message)?
        } else if message.actions.is_empty() {
            let content = post::post_content(&message.text).to_string();
            send_request(&message, "post", &content)
        } else {
            let content = card::card(&message.text, &message.actions).to_string();
            send_request(&message, "interactive", &content)
        };
        let value = call("POST", &path, Some(body)).map_err(ChannelError::from)?;
        match value["data"]["message_id"]
            .as_str()
            .filter(|id| !id.is_empty())
        {
            Some(id) => Ok(Delivery { id: id.into() }),
            None => {
                log(
                    logging::Level::Warn,
                    "the send answered code 0 without data.message_id",
                );
                Ok(Delivery { id: String::new() })
            }
        }
    }

    /// The working reaction while a turn runs, and what it does now as a
    /// card under the message, updated in place
    /// (https://open.feishu.cn/document/server-docs/im-v1/message-card/patch).
    fn status(update: StatusUpdate) -> Result<Option<String>, ChannelError> {
        if !update.message_id.starts_with("om_") {
            return Ok(None);
        }
        let mut handle = StatusHandle::parse(update.handle.as_deref());
        let path = format!("/open-apis/im/v1/messages/{}/reactions", update.message_id);
        match (update.state, update.detail.as_deref()) {
            (TurnState::Working, None) => {
                if let Some(emoji) = working_reaction(config::get("working_reaction")) {
                    let body = json!({ "reaction_type": { "emoji_type": emoji } });
                    let value = call("POST", &path, Some(body)).map_err(ChannelError::from)?;
                    handle.reaction = value["data"]["reaction_id"].as_str().map(str::to_string);
                }
            }
            (TurnState::Working, Some(detail)) => {
                let text = format!("⏳ {detail}");
                status_card(&update, &mut handle, &text)?;
            }
            (TurnState::Done | TurnState::Failed, _) => {
                if let Some(reaction) = handle.reaction.take() {
                    match call("DELETE", &format!("{path}/{reaction}"), None) {
                        Ok(_) => {}
                        // Already gone (removed by hand): nothing to do.
                        Err(CallError::Feishu(Failure::Rejected { code, .. }))
                            if REACTION_GONE.contains(&code) => {}
                        Err(err) => return Err(err.into()),
                    }
                }
                if handle.card.is_some() {
                    let text = if update.state == TurnState::Done {
                        "✅ finished; the answer follows"
                    } else {
                        "⚠️ stopped; see the message below"
                    };
                    status_card(&update, &mut handle, text)?;
                    handle.card = None;
                }
            }
        }
        Ok(handle.stored())
    }

    fn check() -> Vec<CheckItem> {
        let item = |name: &str, ok: bool, detail: String| CheckItem {
            name: name.into(),
            ok,
            detail,
        };
        let mut items = Vec::new();
        let base = match base() {
            Ok(base) => base,
            Err(e) => {
                items.push(item("domain", false, error_text(&e)));
                return items;
            }
        };
        let long = long_connection(&base);
        items.push(item(
            "domain",
            true,
            format!(
                "{base}; events by {}",
                if long {
                    "the long connection"
                } else {
                    "webhook (<mount>/events)"
                }
            ),
        ));
        match fetch_token(HTTP_TIMEOUT_MS) {
            Ok(()) => items.push(item(
                "tenant token",
                true,
                "tenant_access_token/internal answered code 0: app_id and app_secret work".into(),
            )),
            Err(e) => {
                items.push(item("tenant token", false, error_text(&e)));
                return items;
            }
        }
        match call("GET", "/open-apis/bot/v3/info", None) {
            Ok(value) => {
                let bot = &value["bot"];
                if let Some(id) = bot["open_id"].as_str() {
                    kv_set(KV_BOT_OPEN_ID, id.as_bytes(), None);
                }
                let name = format!(
                    "bot/v3/info: {} (open_id {})",
                    bot["app_name"].as_str().unwrap_or("?"),
                    bot["open_id"].as_str().unwrap_or("?")
                );
                items.push(match bot_inactive(bot["activate_status"].as_i64()) {
                    None => item("bot", true, name),
                    Some(why) => item("bot", false, format!("{name}: {why}")),
                });
            }
            Err(e) => items.push(item(
                "bot",
                false,
                format!(
                    "{}; enable the Bot capability under Features and publish a version",
                    error_text(&ChannelError::from(e))
                ),
            )),
        }
        if long {
            items.push(match Self::connect() {
                Ok(Some(request)) => item(
                    "long connection",
                    true,
                    format!(
                        "the endpoint answered a websocket on {} (ping every {} s)",
                        host_of(&request.url),
                        request.keepalive.map_or(0, |k| k.interval_ms / 1000)
                    ),
                ),
                Ok(None) => item("long connection", true, "not used".into()),
                Err(e) => item("long connection", false, error_text(&e)),
            });
        }
        let encrypted = secrets::is_set(ENCRYPT_KEY);
        let tokened = secrets::is_set(VERIFICATION_TOKEN);
        items.push(item(
            "webhook security",
            long || encrypted || tokened,
            match (encrypted, tokened) {
                (true, true) => "encrypt_key and verification_token set: webhooks are signed, encrypted and token-checked".into(),
                (true, false) => "encrypt_key set: webhooks are signed and encrypted".into(),
                (false, true) => "verification_token set (no encrypt_key): webhook events are checked by token only, unsigned and in clear text; setting encrypt_key is safer".into(),
                (false, false) if long => "neither encrypt_key nor verification_token: webhooks are refused (the long connection does not need them)".into(),
                (false, false) => "neither encrypt_key nor verification_token: every webhook is refused and no message can arrive; set one (Events & Callbacks > Encryption Strategy)".into(),
            },
        ));
        items
    }
}

pincer_plugin_sdk::export_channel!(FeishuChannel);

// ----- The thin layer over the host's imports.

fn log(level: logging::Level, line: &str) {
    logging::log(level, line);
}

fn base() -> Result<String, ChannelError> {
    parse_domain(config::get("domain")).map_err(ChannelError::Unsupported)
}

fn long_connection(base: &str) -> bool {
    use_long_connection(base, config::get("mode").as_deref())
}

fn app_id() -> Result<String, ChannelError> {
    config::get("app_id")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            ChannelError::Unsupported(
                "`app_id` is not set: give the app's App ID (cli_…) from Credentials & Basic Info"
                    .into(),
            )
        })
}

fn kv_set(key: &str, value: &[u8], ttl_ms: Option<u64>) {
    if let Err(err) = kv::set(key, value, ttl_ms) {
        log(logging::Level::Warn, &format!("kv set {key}: {err:?}"));
    }
}

fn kv_string(key: &str) -> Option<String> {
    match kv::get(key) {
        Ok(Some(entry)) => String::from_utf8(entry.value)
            .ok()
            .filter(|s| !s.is_empty()),
        Ok(None) => None,
        Err(err) => {
            log(logging::Level::Warn, &format!("kv get {key}: {err:?}"));
            None
        }
    }
}

fn stored_service_id() -> Option<i32> {
    kv_string(KV_SERVICE_ID)?.parse().ok()
}

/// The whole payload of a data frame, gathering split parts in kv; `None`
/// while parts are missing.
fn joined_payload(frame: &frame::Frame) -> Result<Option<Vec<u8>>, ChannelError> {
    let payload = frame.payload.clone().unwrap_or_default();
    let Some((sum, seq)) =
        ws::split(frame.header("sum"), frame.header("seq")).map_err(ChannelError::BadRequest)?
    else {
        return Ok(Some(payload));
    };
    let message_id = frame.header("message_id").unwrap_or("");
    if message_id.is_empty() || message_id.contains('/') {
        return Err(ChannelError::BadRequest(format!(
            "split frame with a bad message_id {message_id:?}"
        )));
    }
    let prefix = format!("ws/part/{message_id}/");
    kv::set(&format!("{prefix}{seq}"), &payload, Some(PART_TTL_MS)).map_err(|err| {
        ChannelError::Upstream(format!("cannot keep a split event part: {err:?}"))
    })?;
    let keys = kv::list_keys(&prefix, 128)
        .map_err(|err| ChannelError::Upstream(format!("cannot list split event parts: {err:?}")))?;
    let mut parts = BTreeMap::new();
    for key in &keys {
        let Some(seq) = key
            .strip_prefix(&prefix)
            .and_then(|s| s.parse::<usize>().ok())
        else {
            continue;
        };
        if let Ok(Some(entry)) = kv::get(key) {
            parts.insert(seq, entry.value);
        }
    }
    let whole = ws::assemble(sum, &parts);
    if whole.is_some() {
        for key in &keys {
            let _ = kv::delete(key);
        }
    }
    Ok(whole)
}

/// The messages of one verified event (none for other events).
fn messages_of(envelope: &event::Envelope) -> Vec<Message> {
    let kind = envelope.event_type();
    if kind != event::MESSAGE_RECEIVE {
        log(logging::Level::Debug, &format!("event {kind:?} ignored"));
        return Vec::new();
    }
    let Some(body) = envelope.event.as_ref() else {
        return Vec::new();
    };
    let bot = kv_string(KV_BOT_OPEN_ID);
    if bot.is_none() {
        log(
            logging::Level::Warn,
            "the bot's open_id is unknown (bot/v3/info failed when connecting); group messages \
             count any mention",
        );
    }
    match event::message(body, bot.as_deref()) {
        Ok(message) => vec![message],
        Err(skip) => {
            log(
                logging::Level::Debug,
                &format!(
                    "event {} ignored: {skip}",
                    envelope.header.as_ref().map_or("", |h| h.event_id.as_str())
                ),
            );
            Vec::new()
        }
    }
}

/// Keeps the bot's open_id (`GET /open-apis/bot/v3/info`) in kv, trying
/// until `deadline_ms` (clock ms) at most; a failure is logged, and the
/// last id learnt stays.
fn learn_bot_open_id(deadline_ms: u64) {
    let left = || {
        u32::try_from(deadline_ms.saturating_sub(clock::now_ms()))
            .unwrap_or(u32::MAX)
            .min(HTTP_TIMEOUT_MS)
    };
    let too_late = || ChannelError::Upstream("no time left to ask".into());
    if !secrets::is_set(TENANT_TOKEN) {
        let fetched = match left() {
            0..200 => Err(too_late()),
            ms => fetch_token(ms),
        };
        if let Err(err) = fetched {
            log(
                logging::Level::Warn,
                &format!(
                    "no tenant token to ask bot/v3/info with: {}",
                    error_text(&err)
                ),
            );
            return;
        }
    }
    let outcome = match left() {
        0..200 => Err(CallError::Channel(too_late())),
        ms => call_within("GET", "/open-apis/bot/v3/info", None, ms),
    };
    match outcome {
        Ok(value) => {
            if let Some(id) = value["bot"]["open_id"].as_str().filter(|id| !id.is_empty()) {
                kv_set(KV_BOT_OPEN_ID, id.as_bytes(), None);
            }
        }
        Err(err) => log(
            logging::Level::Warn,
            &format!(
                "bot/v3/info failed ({}); group messages count any mention until it answers",
                error_text(&ChannelError::from(err))
            ),
        ),
    }
}

fn verify_signature(request: &WebhookRequest) -> Result<(), ChannelError> {
    let check = webhook::prepare(
        header_value(&request.headers, webhook::TIMESTAMP_HEADER),
        header_value(&request.headers, webhook::NONCE_HEADER),
        header_value(&request.headers, webhook::SIGNATURE_HEADER),
        clock::now_ms(),
    )
    .map_err(ChannelError::Unauthorized)?;
    let parts = [
        Part::Bytes(check.timestamp.into_bytes()),
        Part::Bytes(check.nonce.into_bytes()),
        Part::Secret(ENCRYPT_KEY.into()),
        Part::Bytes(request.body.clone()),
    ];
    match secrets::verify(Digest::Sha256, None, &parts, &check.expected) {
        Ok(true) => Ok(()),
        Ok(false) => Err(ChannelError::Unauthorized(format!(
            "{} does not match: the request is not from Feishu, or `encrypt_key` is not this \
             app's Encrypt Key",
            webhook::SIGNATURE_HEADER
        ))),
        Err(err) => Err(secret_error(ENCRYPT_KEY, err)),
    }
}

/// The event JSON: the body, or the decryption of its `encrypt`.
fn plaintext(body: &[u8], encrypted: bool) -> Result<Vec<u8>, ChannelError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| ChannelError::BadRequest(format!("the webhook body is not JSON: {err}")))?;
    let Some(cipher) = value.get("encrypt").and_then(Value::as_str) else {
        if encrypted {
            // Feishu encrypts everything once an Encrypt Key is set.
            return Err(ChannelError::Unauthorized(
                "an unencrypted body although `encrypt_key` is set".into(),
            ));
        }
        return Ok(body.to_vec());
    };
    if !encrypted {
        return Err(ChannelError::Unsupported(
            "the event is encrypted but `encrypt_key` is not set: give the app's Encrypt Key"
                .into(),
        ));
    }
    let data = webhook::base64_decode(cipher).map_err(ChannelError::BadRequest)?;
    secrets::decrypt(Cipher::Aes256CbcSha256Key, ENCRYPT_KEY, &data).map_err(|err| match err {
        SecretError::Invalid(why) => ChannelError::Unauthorized(format!(
            "the event does not decrypt with `encrypt_key` ({why})"
        )),
        other => secret_error(ENCRYPT_KEY, other),
    })
}

/// The host compares the event's verification token with
/// `verification_token` and removes it before this plugin sees the event
/// (`[[webhook.verify]]` in plugin.toml), answering 401 itself when it is
/// missing or different; so a token still here was not checked.
fn check_token(token: Option<&str>, tokened: bool) -> Result<(), ChannelError> {
    if tokened && token.is_some() {
        return Err(ChannelError::Unauthorized(
            "the event's verification token reached the plugin unchecked".into(),
        ));
    }
    Ok(())
}

fn secret_error(name: &str, err: SecretError) -> ChannelError {
    match err {
        SecretError::Unknown(_) => ChannelError::Unsupported(format!("`{name}` is not set")),
        SecretError::Denied(why) => {
            ChannelError::Unsupported(format!("the host refused the secret `{name}`: {why}"))
        }
        SecretError::Invalid(why) => ChannelError::Unauthorized(format!("`{name}`: {why}")),
    }
}

/// A failed Open API call.
enum CallError {
    Feishu(Failure),
    Channel(ChannelError),
}

impl From<CallError> for ChannelError {
    fn from(err: CallError) -> Self {
        match err {
            CallError::Feishu(failure) => failure_error(failure),
            CallError::Channel(err) => err,
        }
    }
}

/// `POST /open-apis/auth/v3/tenant_access_token/internal`: the host puts
/// `app_secret` in and keeps the token as `tenant_token`
/// (https://open.feishu.cn/document/server-docs/authentication-management/access-token/tenant_access_token_internal).
fn fetch_token(timeout_ms: u32) -> Result<(), ChannelError> {
    let url = format!("{}/open-apis/auth/v3/tenant_access_token/internal", base()?);
    let response = http::fetch(&HttpRequest {
        method: "POST".into(),
        url: url.clone(),
        headers: vec![header("content-type", "application/json; charset=utf-8")],
        body: json!({ "app_id": app_id()? }).to_string().into_bytes(),
        timeout_ms: Some(timeout_ms),
        secrets: vec![json_secret(APP_SECRET, "/app_secret")],
        capture: Some(Capture {
            pointer: "/tenant_access_token".into(),
            secret: TENANT_TOKEN.into(),
            expires_in_pointer: Some("/expire".into()),
        }),
    })
    .map_err(|err| http_error("tenant_access_token", &url, err))?;
    match api::check(
        "tenant_access_token",
        response.status,
        header_value(&response.headers, "x-ogw-ratelimit-reset"),
        &response.body,
    ) {
        Ok(_) => Ok(()),
        Err(Failure::Rejected { code, message }) => Err(ChannelError::Unauthorized(format!(
            "{message}; {}",
            token_hint(code)
        ))),
        Err(other) => Err(failure_error(other)),
    }
}

/// Fetches the tenant token when the host holds none.
fn ensure_token(timeout_ms: u32) -> Result<(), ChannelError> {
    if secrets::is_set(TENANT_TOKEN) {
        Ok(())
    } else {
        fetch_token(timeout_ms)
    }
}

/// One Open API call with the tenant token, fetched first when the host
/// holds none, and fetched afresh once when Feishu refuses it.
fn call(method: &str, path: &str, body: Option<Value>) -> Result<Value, CallError> {
    call_within(method, path, body, HTTP_TIMEOUT_MS)
}

/// [`call`] with each request's timeout.
fn call_within(
    method: &str,
    path: &str,
    body: Option<Value>,
    timeout_ms: u32,
) -> Result<Value, CallError> {
    ensure_token(timeout_ms).map_err(CallError::Channel)?;
    match call_once(method, path, body.as_ref(), timeout_ms) {
        Err(CallError::Feishu(Failure::TokenInvalid(why))) => {
            log(
                logging::Level::Info,
                &format!("{why}; fetching a fresh token"),
            );
            fetch_token(timeout_ms).map_err(CallError::Channel)?;
            call_once(method, path, body.as_ref(), timeout_ms)
        }
        other => other,
    }
}

fn call_once(
    method: &str,
    path: &str,
    body: Option<&Value>,
    timeout_ms: u32,
) -> Result<Value, CallError> {
    let url = format!("{}{path}", base().map_err(CallError::Channel)?);
    let what = format!("{method} {}", path.split('?').next().unwrap_or(path));
    let response = http::fetch(&HttpRequest {
        method: method.into(),
        url: url.clone(),
        headers: vec![header("content-type", "application/json; charset=utf-8")],
        body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
        timeout_ms: Some(timeout_ms),
        secrets: vec![tenant_bearer()],
        capture: None,
    })
    .map_err(|err| CallError::Channel(http_error(&what, &url, err)))?;
    api::check(
        &what,
        response.status,
        header_value(&response.headers, "x-ogw-ratelimit-reset"),
        &response.body,
    )
    .map_err(CallError::Feishu)
}

/// Uploads the file of the `send-file` call in progress as `how` says;
/// the key Feishu gives it.
fn upload_file(how: &files::Upload) -> Result<String, ChannelError> {
    ensure_token(HTTP_TIMEOUT_MS)?;
    let url = format!("{}{}", base()?, how.path);
    let form = upload::Body::Multipart(upload::MultipartForm {
        fields: how
            .fields
            .iter()
            .map(|(name, value)| upload::FormField {
                name: name.clone(),
                value: value.clone(),
            })
            .collect(),
        file_field: how.file_field.into(),
    });
    let request = HttpRequest {
        method: "POST".into(),
        url: url.clone(),
        headers: Vec::new(),
        body: Vec::new(),
        timeout_ms: Some(UPLOAD_TIMEOUT_MS),
        secrets: vec![tenant_bearer()],
        capture: None,
    };
    let response = upload::send(&request, &form).map_err(|err| http_error(how.path, &url, err))?;
    let answer = api::check(
        how.path,
        response.status,
        header_value(&response.headers, "x-ogw-ratelimit-reset"),
        &response.body,
    )
    .map_err(failure_error)?;
    answer["data"][how.key_field]
        .as_str()
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .ok_or_else(|| {
            ChannelError::Upstream(format!(
                "{} answered without data.{}",
                how.path, how.key_field
            ))
        })
}

fn tenant_bearer() -> SecretUse {
    SecretUse {
        secret: TENANT_TOKEN.into(),
        place: SecretPlace::Header(SecretHeader {
            name: "authorization".into(),
            prefix: "Bearer ".into(),
        }),
    }
}

// ----- Pure helpers.

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

fn json_secret(secret: &str, pointer: &str) -> SecretUse {
    SecretUse {
        secret: secret.into(),
        place: SecretPlace::JsonField(pointer.into()),
    }
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?']).next().unwrap_or(rest)
}

/// The Open API base URL of `domain`: `feishu` (default), `lark`, or a URL.
fn parse_domain(value: Option<String>) -> Result<String, String> {
    let value = value.unwrap_or_default();
    let value = value.trim().trim_end_matches('/');
    match value.to_ascii_lowercase().as_str() {
        "" | "feishu" => Ok(FEISHU_BASE.into()),
        "lark" | "larksuite" => Ok(LARK_BASE.into()),
        _ if value.starts_with("https://") || value.starts_with("http://") => Ok(value.into()),
        _ => Err(format!(
            "`domain` must be feishu, lark or an http(s):// URL, got {value:?}"
        )),
    }
}

/// Whether events come over the long connection: `mode` long_connection
/// (the default) except on Lark, which only has webhooks.
fn use_long_connection(base: &str, mode: Option<&str>) -> bool {
    let mode = mode.map(str::trim).unwrap_or("");
    if base == LARK_BASE {
        return false;
    }
    !mode.eq_ignore_ascii_case("webhook")
}

/// The reaction while working: the default when unset, none when empty.
fn working_reaction(value: Option<String>) -> Option<String> {
    match value {
        None => Some(DEFAULT_REACTION.into()),
        Some(value) => {
            let name = value.trim().trim_matches(':').trim();
            (!name.is_empty()).then(|| name.to_string())
        }
    }
}

fn keepalive(service: i32, timing: &ws::Timing) -> Keepalive {
    Keepalive {
        frame: Frame::Binary(frame::ping(service).encode()),
        interval_ms: timing.ping_interval_ms,
    }
}

fn policy(timing: &ws::Timing) -> ReconnectPolicy {
    ReconnectPolicy {
        min_delay_ms: timing.min_delay_ms,
        max_delay_ms: timing.max_delay_ms,
        jitter_ms: timing.jitter_ms,
        max_attempts: timing.max_attempts,
    }
}

/// What `status` hands back: the reaction to remove, the status card to
/// update. Stored as JSON; a bare reaction id is what came before cards.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct StatusHandle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reaction: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    card: Option<String>,
}

impl StatusHandle {
    fn parse(stored: Option<&str>) -> Self {
        match stored.map(str::trim).filter(|s| !s.is_empty()) {
            None => Self::default(),
            Some(json) if json.starts_with('{') => serde_json::from_str(json).unwrap_or_default(),
            Some(reaction) => Self {
                reaction: Some(reaction.to_string()),
                card: None,
            },
        }
    }

    fn stored(&self) -> Option<String> {
        (*self != Self::default()).then(|| serde_json::to_string(self).unwrap_or_default())
    }
}

/// Shows `text` in the turn's status card: sent as a reply the first
/// time, then replaced.
fn status_card(
    update: &StatusUpdate,
    handle: &mut StatusHandle,
    text: &str,
) -> Result<(), ChannelError> {
    let content = card::card(text, &[]).to_string();
    match &handle.card {
        Some(id) => {
            call(
                "PATCH",
                &format!("/open-apis/im/v1/messages/{id}"),
                Some(json!({ "content": content })),
            )
            .map_err(ChannelError::from)?;
        }
        None => {
            let message = Outbound {
                conversation: update.conversation.clone(),
                thread: update.thread.clone(),
                text: text.to_string(),
                reply_to: Some(update.message_id.clone()),
                actions: Vec::new(),
                visible_to: None,
            };
            let (path, body) = send_request(&message, "interactive", &content);
            let value = call("POST", &path, Some(body)).map_err(ChannelError::from)?;
            handle.card = value["data"]["message_id"].as_str().map(str::to_string);
        }
    }
    Ok(())
}

/// Path and body of a send: a reply to the inbound message
/// (https://open.feishu.cn/document/server-docs/im-v1/message/reply), in its
/// thread when the outbound has one, or a new message in the chat
/// (https://open.feishu.cn/document/server-docs/im-v1/message/create).
fn send_request(message: &Outbound, msg_type: &str, content: &str) -> (String, Value) {
    match message
        .reply_to
        .as_deref()
        .filter(|id| id.starts_with("om_"))
    {
        Some(id) => {
            let mut body = json!({ "msg_type": msg_type, "content": content });
            if message.thread.as_deref().is_some_and(|t| !t.is_empty()) {
                body["reply_in_thread"] = json!(true);
            }
            (format!("/open-apis/im/v1/messages/{id}/reply"), body)
        }
        None => (
            format!(
                "/open-apis/im/v1/messages?receive_id_type={}",
                receive_id_type(&message.conversation)
            ),
            json!({ "receive_id": message.conversation, "msg_type": msg_type, "content": content }),
        ),
    }
}

/// A conversation is a chat (`oc_…`) or, for a direct message the host
/// sends a person (a pairing code), their `open_id` (`ou_…`): Feishu then
/// delivers it in the bot's p2p chat with them.
fn receive_id_type(conversation: &str) -> &'static str {
    if conversation.starts_with("ou_") {
        "open_id"
    } else {
        "chat_id"
    }
}

/// A card only `visible_to` sees in the chat
/// (https://open.feishu.cn/document/server-docs/im-v1/message-card/send-message-cards-that-are-only-visible-to-certain-people).
fn ephemeral_request(message: &Outbound) -> Result<(String, Value), ChannelError> {
    let user = message.visible_to.as_deref().unwrap_or_default();
    if !user.starts_with("ou_") {
        return Err(ChannelError::Rejected(format!(
            "a card for one reader needs their open_id (ou_…), not `{user}`"
        )));
    }
    Ok((
        "/open-apis/ephemeral/v1/send".into(),
        json!({
            "chat_id": message.conversation,
            "open_id": user,
            "msg_type": "interactive",
            "card": card::card(&message.text, &message.actions),
        }),
    ))
}

/// The click of a verified card callback (none when it is not one of
/// pincer's buttons).
fn click_of(envelope: &event::Envelope) -> Option<pincer_plugin_sdk::types::Interaction> {
    card::click(envelope, clock::now_ms())
        .inspect_err(|why| {
            log(
                logging::Level::Debug,
                &format!("card callback ignored: {why}"),
            )
        })
        .ok()
}

/// What to fix when `tenant_access_token/internal` refuses: 10014 "app
/// secret invalid", 10003 "invalid param" (an unknown `app_id` among them).
fn token_hint(code: i64) -> &'static str {
    match code {
        10_014 => {
            "`app_secret` is not this app's App Secret: copy the App Secret from Credentials & \
             Basic Info again"
        }
        10_003 => "check `app_id` (cli_…, Credentials & Basic Info) and `app_secret`",
        _ => "check `app_id` and `app_secret` (Credentials & Basic Info)",
    }
}

/// Why the app cannot talk yet, from bot/v3/info's `activate_status`
/// (https://open.feishu.cn/document/ukTMukTMukTM/uAjMxEjLwITMx4CMyETM):
/// 2 is "enabled in the tenant"; absent is taken as fine.
fn bot_inactive(status: Option<i64>) -> Option<String> {
    let why = match status? {
        2 => return None,
        0 => "the app is not installed in the tenant yet",
        1 => "the tenant disabled the app",
        3 => "installed but not enabled yet",
        4 => "a new version waits to be enabled",
        5 => "disabled: the license expired",
        6 => "disabled: the Lark plan expired or was downgraded",
        _ => "not enabled",
    };
    Some(format!(
        "activate_status {}: {why}; publish a version (Version Management & Release) and have \
         an admin approve it",
        status.unwrap_or_default()
    ))
}

/// A channel error as one line for people.
fn error_text(err: &ChannelError) -> String {
    match err {
        ChannelError::Unauthorized(m)
        | ChannelError::BadRequest(m)
        | ChannelError::Upstream(m)
        | ChannelError::Unsupported(m)
        | ChannelError::Rejected(m) => m.clone(),
        ChannelError::RetryLater(r) => format!("{} (retry in {} ms)", r.reason, r.after_ms),
    }
}

fn http_error(what: &str, url: &str, err: HttpError) -> ChannelError {
    match err {
        HttpError::Denied(why) => ChannelError::Unsupported(format!(
            "{what}: the host does not let this plugin reach {url} ({why}); `domain` must be on \
             feishu.cn / larksuite.com or allowed for the channel"
        )),
        HttpError::InvalidRequest(why) => ChannelError::Unsupported(format!(
            "{what}: the request to {url} is invalid ({why}); check `domain`"
        )),
        HttpError::Transport(why) => {
            ChannelError::Upstream(format!("{what}: cannot reach Feishu: {why}"))
        }
        HttpError::Timeout => {
            ChannelError::Upstream(format!("{what}: Feishu did not answer in time"))
        }
        HttpError::TooLarge => {
            ChannelError::Upstream(format!("{what}: Feishu's answer is too large"))
        }
    }
}

fn failure_error(failure: Failure) -> ChannelError {
    match failure {
        Failure::RetryLater { after_ms, reason } => {
            ChannelError::RetryLater(RetryAfter { after_ms, reason })
        }
        Failure::Upstream(message) => ChannelError::Upstream(message),
        Failure::TokenInvalid(message) => ChannelError::Unauthorized(message),
        Failure::Rejected { message, .. } => ChannelError::Rejected(message),
    }
}

/// The answer to a request outside `POST /events`, if it is one.
fn route(method: &str, path: &str) -> Option<WebhookOutcome> {
    let path = path.split('?').next().unwrap_or(path);
    if path.trim_end_matches('/') != "/events" {
        return Some(webhook_reply(
            404,
            json!({ "error": "not found; Feishu's Request URL is <mount>/events" }),
        ));
    }
    if !method.eq_ignore_ascii_case("POST") {
        let mut outcome = webhook_reply(405, json!({ "error": "method not allowed" }));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn outbound(reply_to: Option<&str>, thread: Option<&str>) -> Outbound {
        Outbound {
            conversation: "oc_1".into(),
            thread: thread.map(str::to_string),
            text: "hi".into(),
            reply_to: reply_to.map(str::to_string),
            actions: Vec::new(),
            visible_to: None,
        }
    }

    #[test]
    fn describe_fits_a_post() {
        assert_eq!(FeishuChannel::describe().max_text_bytes, 8000);
        // 8000 bytes of dense Markdown stay under Feishu's 30 KB post limit.
        let md = "**粗体** [链接](https://example.com/a) `代码` 中文\n".repeat(8000 / 60);
        assert!(md.len() <= 8000);
        let content = post::post_content(&md).to_string();
        let body =
            json!({ "receive_id": "oc_1", "msg_type": "post", "content": content }).to_string();
        assert!(body.len() < 30 * 1024, "{} bytes", body.len());
    }

    #[test]
    fn send_requests() {
        let (path, body) = send_request(&outbound(Some("om_9"), None), "post", "{}");
        assert_eq!(path, "/open-apis/im/v1/messages/om_9/reply");
        assert_eq!(body, json!({ "msg_type": "post", "content": "{}" }));
        let (_, body) = send_request(&outbound(Some("om_9"), Some("om_9")), "post", "{}");
        assert_eq!(body["reply_in_thread"], true);
        let (path, body) = send_request(&outbound(None, None), "post", "{}");
        assert_eq!(path, "/open-apis/im/v1/messages?receive_id_type=chat_id");
        assert_eq!(body["receive_id"], "oc_1");
        let mut to_person = outbound(None, None);
        to_person.conversation = "ou_7d8a6e6df7621556ce0d21922b676706ccs".into();
        let (path, _) = send_request(&to_person, "post", "{}");
        assert_eq!(path, "/open-apis/im/v1/messages?receive_id_type=open_id");
        assert_eq!(body["msg_type"], "post");
        let (_, body) = send_request(&outbound(None, None), "interactive", "{}");
        assert_eq!(body["msg_type"], "interactive");
    }

    #[test]
    fn a_card_for_one_reader_goes_to_the_ephemeral_api_by_open_id() {
        let mut only = outbound(None, None);
        only.visible_to = Some("ou_1".into());
        let (path, body) = ephemeral_request(&only).expect("ephemeral");
        assert_eq!(path, "/open-apis/ephemeral/v1/send");
        assert_eq!(
            (&body["chat_id"], &body["open_id"], &body["msg_type"]),
            (&json!("oc_1"), &json!("ou_1"), &json!("interactive"))
        );
        assert_eq!(body["card"]["schema"], "2.0");
        only.visible_to = Some("U123".into());
        assert!(matches!(
            ephemeral_request(&only),
            Err(ChannelError::Rejected(_))
        ));
    }

    #[test]
    fn errors_map_to_channel_errors() {
        let e = |status, reset, body: &str| {
            api::check("send", status, reset, body.as_bytes()).map_err(failure_error)
        };
        assert!(matches!(
            e(429, Some("3"), ""),
            Err(ChannelError::RetryLater(RetryAfter { after_ms: 3000, .. }))
        ));
        assert!(matches!(
            e(400, None, r#"{"code":99991400,"msg":"limit"}"#),
            Err(ChannelError::RetryLater(RetryAfter { after_ms: 1000, .. }))
        ));
        assert!(matches!(e(503, None, ""), Err(ChannelError::Upstream(_))));
        assert!(matches!(
            e(400, None, r#"{"code":230001,"msg":"invalid receive_id"}"#),
            Err(ChannelError::Rejected(m)) if m.contains("230001") && m.contains("invalid receive_id")
        ));
        assert!(matches!(
            e(
                400,
                None,
                r#"{"code":99991663,"msg":"Invalid access token"}"#
            ),
            Err(ChannelError::Unauthorized(_))
        ));
        assert!(matches!(
            http_error("send", "https://x", HttpError::Denied("no".into())),
            ChannelError::Unsupported(m) if m.contains("domain")
        ));
        assert!(matches!(
            http_error("send", "https://x", HttpError::Timeout),
            ChannelError::Upstream(_)
        ));
    }

    #[test]
    fn domains_and_modes() {
        assert_eq!(parse_domain(None).as_deref(), Ok(FEISHU_BASE));
        assert_eq!(
            parse_domain(Some(" Feishu ".into())).as_deref(),
            Ok(FEISHU_BASE)
        );
        assert_eq!(parse_domain(Some("lark".into())).as_deref(), Ok(LARK_BASE));
        assert_eq!(
            parse_domain(Some("http://127.0.0.1:9/".into())).as_deref(),
            Ok("http://127.0.0.1:9")
        );
        assert!(parse_domain(Some("open.feishu.cn".into())).is_err());
        assert!(use_long_connection(FEISHU_BASE, None));
        assert!(use_long_connection(FEISHU_BASE, Some("long_connection")));
        assert!(!use_long_connection(FEISHU_BASE, Some("webhook")));
        assert!(!use_long_connection(LARK_BASE, None));
        assert!(!use_long_connection(LARK_BASE, Some("long_connection")));
        assert!(use_long_connection("http://127.0.0.1:9", None));
        assert_eq!(
            host_of("wss://msg-frontier.feishu.cn/ws/v2?x=1"),
            "msg-frontier.feishu.cn"
        );
    }

    #[test]
    fn working_reactions() {
        assert_eq!(working_reaction(None).as_deref(), Some("Typing"));
        assert_eq!(working_reaction(Some(" ".into())), None);
        assert_eq!(working_reaction(Some("OK".into())).as_deref(), Some("OK"));
    }

    #[test]
    fn keepalive_from_timing() {
        let timing = ws::ClientConfig {
            ping_interval: Some(90),
            ..Default::default()
        }
        .timing();
        let k = keepalive(42, &timing);
        assert_eq!(k.interval_ms, 90_000);
        let Frame::Binary(bytes) = k.frame else {
            panic!("binary")
        };
        let ping = frame::Frame::decode(&bytes).expect("ping");
        assert_eq!((ping.service, ping.method), (42, frame::METHOD_CONTROL));
        assert_eq!(ping.header("type"), Some("ping"));
        let p = policy(&timing);
        assert_eq!(
            (p.min_delay_ms, p.max_delay_ms, p.jitter_ms, p.max_attempts),
            (1000, 120_000, 30_000, None)
        );
    }

    #[test]
    fn check_hints_name_what_to_fix() {
        assert_eq!(bot_inactive(Some(2)), None);
        assert_eq!(bot_inactive(None), None);
        let why = bot_inactive(Some(3)).expect("not enabled");
        assert!(
            why.starts_with("activate_status 3: installed but not enabled yet"),
            "{why}"
        );
        assert!(bot_inactive(Some(42)).is_some());
        assert!(token_hint(10_014).contains("`app_secret` is not this app's App Secret"));
        assert!(token_hint(10_003).contains("`app_id`"));
        let e = ChannelError::RetryLater(RetryAfter {
            after_ms: 2000,
            reason: "slow down".into(),
        });
        assert_eq!(error_text(&e), "slow down (retry in 2000 ms)");
        assert_eq!(error_text(&ChannelError::Rejected("no".into())), "no");
    }

    #[test]
    fn webhook_routes() {
        assert_eq!(route("POST", "/x").map(|o| o.response.status), Some(404));
        let o = route("GET", "/events").expect("405");
        assert_eq!(o.response.status, 405);
        assert_eq!(header_value(&o.response.headers, "Allow"), Some("POST"));
        assert!(route("post", "/events/").is_none());
    }
}
