//! Channel `channel-webhook`: a generic JSON channel. Messages arrive as
//! webhook POSTs (HMAC-signed with the `secret` when one is set; the host
//! checks the signature, the plugin never sees the secret) or as frames on a
//! websocket the host holds open to `ws_url`; replies are POSTed as JSON to
//! `outbound_url`, carrying `Authorization: Bearer <secret>` when one is set
//! (put in by the host).

mod signature;
mod wire;

use pincer_plugin_sdk::channel::{
    ChannelError, ChannelInfo, CheckItem, ConnectionRequest, Delivery, Frame, FrameOutcome, Guest,
    HistoryRequest, OutboundFile, PastMessage, StatusUpdate, WebhookOutcome, WebhookRequest,
};
use pincer_plugin_sdk::http::{self, Request};
use pincer_plugin_sdk::secrets::{self, Digest, Part, SecretError};
use pincer_plugin_sdk::types::{Attachment, Header, HttpRequest, HttpResponse, Message, Outbound};
use pincer_plugin_sdk::{clock, config};
use serde_json::{Value, json};

/// The host reconnects when the websocket has been silent this long.
const IDLE_TIMEOUT_MS: u32 = 60_000;
/// The config key of the shared secret.
const SECRET: &str = "secret";
/// Longest reply text one outbound POST carries (the host splits longer ones).
const MAX_TEXT_BYTES: u32 = 16_000;

struct WebhookChannel;

impl Guest for WebhookChannel {
    fn handle_webhook(request: WebhookRequest) -> Result<WebhookOutcome, ChannelError> {
        let method = request.method.to_ascii_uppercase();
        match (method.as_str(), request.path.as_str()) {
            ("POST", _) => accept_post(&request),
            ("GET", "/health") => Ok(reply(200, json!({ "ok": true }))),
            ("GET", _) => Ok(reply(404, json!({ "ok": false, "error": "not found" }))),
            _ => {
                let mut outcome = reply(405, json!({ "ok": false, "error": "method not allowed" }));
                outcome.response.headers.push(header("allow", "GET, POST"));
                Ok(outcome)
            }
        }
    }

    fn connect() -> Result<Option<ConnectionRequest>, ChannelError> {
        let Some(url) = setting("ws_url") else {
            return Ok(None);
        };
        if !(url.starts_with("ws://") || url.starts_with("wss://")) {
            return Err(ChannelError::Unsupported(format!(
                "`ws_url` must start with ws:// or wss://, got {url:?}"
            )));
        }
        Ok(Some(ConnectionRequest {
            url,
            headers: Vec::new(),
            idle_timeout_ms: Some(IDLE_TIMEOUT_MS),
            keepalive: None,
            reconnect: None,
        }))
    }

    fn on_frame(frame: Frame) -> Result<FrameOutcome, ChannelError> {
        let Frame::Text(text) = frame else {
            return Err(ChannelError::BadRequest(
                "binary frames are not supported".into(),
            ));
        };
        let mut outcome = FrameOutcome {
            replies: Vec::new(),
            messages: Vec::new(),
            interactions: Vec::new(),
            reconnect: false,
            keepalive: None,
            reconnect_policy: None,
        };
        match wire::frame(&text, clock::now_ms()).map_err(ChannelError::BadRequest)? {
            wire::Frame::Message(message) => {
                let ack = json!({ "type": "ack", "id": message.id });
                outcome.replies.push(Frame::Text(ack.to_string()));
                outcome.messages.push(message);
            }
            wire::Frame::Ping => outcome
                .replies
                .push(Frame::Text(json!({ "type": "pong" }).to_string())),
            wire::Frame::Reconnect => outcome.reconnect = true,
        }
        Ok(outcome)
    }

    fn send(message: Outbound) -> Result<Delivery, ChannelError> {
        let url = setting("outbound_url").ok_or_else(|| {
            ChannelError::Unsupported("sending needs the `outbound_url` config key".into())
        })?;
        let body = json!({
            "conversation": message.conversation,
            "thread": message.thread,
            "text": message.text,
            "reply_to": message.reply_to,
        })
        .to_string()
        .into_bytes();
        let now_ms = clock::now_ms();
        let mut request = Request::post(&url)
            .header("content-type", "application/json")
            .body(body);
        if secrets::is_set(SECRET) {
            request = request.secret_header(SECRET, "authorization", "Bearer ");
        }
        let response = request.send().map_err(|err| {
            ChannelError::Upstream(format!("delivery failed: {}", http::describe(&err)))
        })?;
        if !response.is_success() {
            return Err(ChannelError::Upstream(format!(
                "outbound_url answered HTTP {}: {}",
                response.status(),
                snippet(response.body())
            )));
        }
        let id = delivery_id(response.body()).unwrap_or_else(|| now_ms.to_string());
        Ok(Delivery { id })
    }

    fn describe() -> ChannelInfo {
        ChannelInfo {
            max_text_bytes: MAX_TEXT_BYTES,
            interactive: false,
            max_upload_bytes: 0,
        }
    }

    fn history(_request: HistoryRequest) -> Result<Vec<PastMessage>, ChannelError> {
        Err(ChannelError::Unsupported(
            "the webhook channel keeps no history".into(),
        ))
    }

    fn file_request(_message_id: String, _file: Attachment) -> Result<HttpRequest, ChannelError> {
        Err(ChannelError::Unsupported(
            "the webhook channel carries no files".into(),
        ))
    }

    fn send_file(_file: OutboundFile) -> Result<Delivery, ChannelError> {
        Err(ChannelError::Unsupported(
            "the webhook channel carries no files".into(),
        ))
    }

    fn update(_id: String, _message: Outbound) -> Result<Delivery, ChannelError> {
        Err(ChannelError::Unsupported(
            "the webhook channel cannot replace a sent message".into(),
        ))
    }

    fn status(_update: StatusUpdate) -> Result<Option<String>, ChannelError> {
        Ok(None)
    }

    fn check() -> Vec<CheckItem> {
        let item = |name: &str, ok: bool, detail: String| CheckItem {
            name: name.into(),
            ok,
            detail,
        };
        let signed = secrets::is_set(SECRET);
        vec![
            item(
                "secret",
                signed || allows_unsigned(),
                if signed {
                    "set: webhooks must be signed, replies carry it as a bearer token".into()
                } else if allows_unsigned() {
                    "not set, and `allow_unsigned: true`: anyone who reaches the listener can post messages as any sender".into()
                } else {
                    UNSIGNED_REFUSED.into()
                },
            ),
            match setting("outbound_url") {
                Some(url) => item("outbound_url", true, url),
                None => item(
                    "outbound_url",
                    false,
                    "not set: replies cannot be sent".into(),
                ),
            },
        ]
    }
}

fn accept_post(request: &WebhookRequest) -> Result<WebhookOutcome, ChannelError> {
    let now_ms = clock::now_ms();
    if !secrets::is_set(SECRET) && !allows_unsigned() {
        return Err(ChannelError::Unauthorized(UNSIGNED_REFUSED.into()));
    }
    if secrets::is_set(SECRET) {
        signature::verify(
            header_value(&request.headers, signature::TIMESTAMP_HEADER),
            header_value(&request.headers, signature::SIGNATURE_HEADER),
            &request.body,
            now_ms,
            host_hmac,
        )
        .map_err(ChannelError::Unauthorized)?;
    }
    let messages: Vec<Message> =
        wire::webhook_messages(&request.body, now_ms).map_err(ChannelError::BadRequest)?;
    let mut outcome = reply(200, json!({ "ok": true, "accepted": messages.len() }));
    outcome.messages = messages;
    Ok(outcome)
}

const UNSIGNED_REFUSED: &str = "webhooks are refused: `secret` is not set, so nothing tells the sender from a forger; set `secret`, or `allow_unsigned: true` to accept unsigned webhooks from anyone who reaches the listener";

/// `allow_unsigned: true`: the operator accepts unsigned webhooks.
fn allows_unsigned() -> bool {
    config::get("allow_unsigned").as_deref() == Some("true")
}

/// A config value, treating an empty string as unset.
fn setting(key: &str) -> Option<String> {
    config::get(key).filter(|value| !value.trim().is_empty())
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

fn reply(status: u16, body: Value) -> WebhookOutcome {
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

/// Whether `digest` is the HMAC-SHA256 of `"<timestamp>.<body>"` keyed with
/// the secret, computed by the host.
fn host_hmac(timestamp: &str, body: &[u8], digest: &[u8]) -> Result<bool, String> {
    let parts = [
        Part::Bytes(timestamp.as_bytes().to_vec()),
        Part::Bytes(b".".to_vec()),
        Part::Bytes(body.to_vec()),
    ];
    secrets::verify(Digest::HmacSha256, Some(SECRET), &parts, digest).map_err(|err| match err {
        SecretError::Unknown(_) => "the `secret` is not set".to_string(),
        SecretError::Denied(name) | SecretError::Invalid(name) => {
            format!("cannot check the signature: {name}")
        }
    })
}

/// The `id` of a JSON object response, if it has one.
fn delivery_id(body: &[u8]) -> Option<String> {
    match serde_json::from_slice::<Value>(body).ok()?.get("id")? {
        Value::String(id) if !id.is_empty() => Some(id.clone()),
        Value::Number(id) => Some(id.to_string()),
        _ => None,
    }
}

/// The start of a response body, for error messages.
fn snippet(body: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

pincer_plugin_sdk::export_channel!(WebhookChannel);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids() {
        assert_eq!(delivery_id(br#"{"id":"m-1"}"#).as_deref(), Some("m-1"));
        assert_eq!(delivery_id(br#"{"id":42}"#).as_deref(), Some("42"));
        assert_eq!(delivery_id(br#"{"id":""}"#), None);
        assert_eq!(delivery_id(br#"{"ok":true}"#), None);
        assert_eq!(delivery_id(b"accepted"), None);
        assert_eq!(delivery_id(b""), None);
    }

    #[test]
    fn snippets_are_bounded() {
        assert_eq!(snippet(b"short"), "short");
        assert_eq!(snippet("é".repeat(300).as_bytes()).chars().count(), 201);
    }

    #[test]
    fn header_lookup_ignores_case() {
        let headers = [header("x-pincer-timestamp", "1")];
        assert_eq!(
            header_value(&headers, signature::TIMESTAMP_HEADER),
            Some("1")
        );
        assert_eq!(header_value(&headers, signature::SIGNATURE_HEADER), None);
    }

    // Paths that never reach a host import can run natively.
    #[test]
    fn routes_without_host_calls() {
        let request = |method: &str, path: &str| WebhookRequest {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            headers: Vec::new(),
            body: Vec::new(),
        };
        let health = WebhookChannel::handle_webhook(request("GET", "/health")).expect("health");
        assert_eq!(health.response.status, 200);
        assert_eq!(health.response.body, br#"{"ok":true}"#);
        assert!(health.messages.is_empty());
        let put = WebhookChannel::handle_webhook(request("PUT", "/")).expect("405 response");
        assert_eq!(put.response.status, 405);
        assert!(matches!(
            WebhookChannel::on_frame(Frame::Binary(vec![1])),
            Err(ChannelError::BadRequest(_))
        ));
    }
}
