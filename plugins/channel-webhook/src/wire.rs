//! The JSON shapes this channel accepts: webhook bodies and websocket frames.

use pincer_plugin_sdk::types::Message;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Most messages one webhook request may carry.
pub const MAX_BATCH: usize = 100;

/// A message as senders write it; unknown fields are ignored.
#[derive(Debug, Deserialize)]
struct WireMessage {
    id: String,
    conversation: String,
    sender: String,
    text: String,
    #[serde(default)]
    thread: Option<String>,
    #[serde(default)]
    sender_name: Option<String>,
    /// Defaults to the host clock.
    #[serde(default)]
    timestamp_ms: Option<u64>,
}

impl WireMessage {
    fn into_message(self, now_ms: u64) -> Result<Message, String> {
        for (field, value) in [
            ("id", &self.id),
            ("conversation", &self.conversation),
            ("sender", &self.sender),
            ("text", &self.text),
        ] {
            if value.trim().is_empty() {
                return Err(format!("{field}: must not be empty"));
            }
        }
        Ok(Message {
            id: self.id,
            conversation: self.conversation,
            thread: self.thread,
            sender: self.sender,
            sender_name: self.sender_name,
            text: self.text,
            timestamp_ms: self.timestamp_ms.unwrap_or(now_ms),
            files: Vec::new(),
        })
    }
}

/// A webhook body: one message object, or an array of them.
pub fn webhook_messages(body: &[u8], now_ms: u64) -> Result<Vec<Message>, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|err| format!("body is not valid JSON: {err}"))?;
    match value {
        Value::Array(items) if items.len() > MAX_BATCH => Err(format!(
            "at most {MAX_BATCH} messages per request, got {}",
            items.len()
        )),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(index, item)| message(item, now_ms).map_err(|err| format!("[{index}] {err}")))
            .collect(),
        value @ Value::Object(_) => Ok(vec![message(value, now_ms)?]),
        _ => Err("body must be a JSON object or an array of objects".into()),
    }
}

fn message(value: Value, now_ms: u64) -> Result<Message, String> {
    from_value::<WireMessage>(value)?.into_message(now_ms)
}

/// What a websocket text frame asks for.
#[derive(Debug)]
pub enum Frame {
    Message(Message),
    Ping,
    Reconnect,
}

pub fn frame(text: &str, now_ms: u64) -> Result<Frame, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|err| format!("frame is not valid JSON: {err}"))?;
    let kind = match value.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err("type: must be a string".into()),
        None if value.is_object() => return Err("missing field `type`".into()),
        None => return Err("frame must be a JSON object".into()),
    };
    match kind.as_str() {
        "message" => Ok(Frame::Message(message(value, now_ms)?)),
        "ping" => Ok(Frame::Ping),
        "reconnect" => Ok(Frame::Reconnect),
        other => Err(format!("unknown frame type `{other}`")),
    }
}

/// Deserializes with an error that names the offending field.
fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        if path == "." {
            err.inner().to_string()
        } else {
            format!("{path}: {}", err.inner())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn one_message() {
        let body = br#"{"id":"1","conversation":"c","sender":"u","text":"hi","extra":true}"#;
        let messages = webhook_messages(body, NOW).expect("valid");
        let [m] = messages.as_slice() else {
            panic!("expected one message, got {messages:?}");
        };
        assert_eq!(
            (
                m.id.as_str(),
                m.conversation.as_str(),
                m.sender.as_str(),
                m.text.as_str()
            ),
            ("1", "c", "u", "hi")
        );
        assert_eq!(
            (m.thread.as_deref(), m.sender_name.as_deref()),
            (None, None)
        );
        assert_eq!(m.timestamp_ms, NOW);
    }

    #[test]
    fn several_messages() {
        let body = br#"[
            {"id":"1","conversation":"c","sender":"u","text":"a","thread":"t","sender_name":"Ann","timestamp_ms":5},
            {"id":"2","conversation":"c","sender":"u","text":"b"}
        ]"#;
        let messages = webhook_messages(body, NOW).expect("valid");
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].thread.as_deref(), Some("t"));
        assert_eq!(messages[0].sender_name.as_deref(), Some("Ann"));
        assert_eq!(messages[0].timestamp_ms, 5);
        assert_eq!(messages[1].timestamp_ms, NOW);
        assert!(webhook_messages(b"[]", NOW).is_ok_and(|m| m.is_empty()));
    }

    #[test]
    fn bad_bodies_name_the_problem() {
        let err = |body: &[u8]| webhook_messages(body, NOW).expect_err("invalid");
        assert!(err(b"{").starts_with("body is not valid JSON"));
        assert!(err(b"42").contains("JSON object"));
        assert!(err(br#"{"id":"1","conversation":"c","sender":"u"}"#).contains("`text`"));
        assert_eq!(
            err(br#"{"id":"1","conversation":"c","sender":"u","text":" "}"#),
            "text: must not be empty"
        );
        assert!(err(br#"{"id":1,"conversation":"c","sender":"u","text":"x"}"#).starts_with("id:"));
        assert!(
            err(br#"[{"id":"1","conversation":"c","sender":"u","text":"x"},{"id":"2"}]"#)
                .starts_with("[1] missing field `conversation`")
        );
        let many = format!("[{}]", vec!["{}"; MAX_BATCH + 1].join(","));
        assert!(err(many.as_bytes()).starts_with("at most"));
    }

    #[test]
    fn frames() {
        let message = frame(
            r#"{"type":"message","id":"9","conversation":"c","sender":"u","text":"yo"}"#,
            NOW,
        )
        .expect("valid");
        assert!(matches!(message, Frame::Message(m) if m.id == "9" && m.text == "yo"));
        assert!(matches!(frame(r#"{"type":"ping"}"#, NOW), Ok(Frame::Ping)));
        assert!(matches!(
            frame(r#"{"type":"reconnect"}"#, NOW),
            Ok(Frame::Reconnect)
        ));
        assert!(frame(r#"{"type":"hello"}"#, NOW).is_err_and(|e| e.contains("`hello`")));
        assert!(frame(r#"{"id":"1"}"#, NOW).is_err_and(|e| e.contains("`type`")));
        assert!(frame(r#"{"type":7}"#, NOW).is_err());
        assert!(frame("[]", NOW).is_err());
        assert!(frame("nope", NOW).is_err());
        assert!(
            frame(r#"{"type":"message","id":"9"}"#, NOW)
                .is_err_and(|e| e.contains("missing field"))
        );
    }
}
