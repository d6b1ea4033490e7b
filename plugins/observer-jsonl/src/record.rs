//! Turning events into JSON lines, and checking the configured file name.

use pincer_plugin_sdk::types::{Event, EventBody, ToolCall};
use serde_json::{Map, Value, json};

pub const DEFAULT_FILE: &str = "events.jsonl";

/// The file name to write to, or why `configured` cannot be used.
pub fn file_name(configured: Option<&str>) -> Result<&str, String> {
    let Some(name) = configured else {
        return Ok(DEFAULT_FILE);
    };
    if name.is_empty() || name == "." || name.contains('/') || name.contains('\\') {
        return Err(format!("`file` must be a plain file name, got {name:?}"));
    }
    if name.contains("..") || name.contains('\0') {
        return Err(format!("`file` must not contain `..` or NUL, got {name:?}"));
    }
    Ok(name)
}

/// One line of the log, without the trailing newline.
pub fn to_line(event: &Event) -> String {
    let mut object = Map::new();
    object.insert("ts".into(), event.timestamp_ms.into());
    object.insert("workspace".into(), event.workspace.clone().into());
    object.insert("session".into(), event.session.clone().into());
    let (kind, fields) = body_fields(&event.body);
    object.insert("type".into(), kind.into());
    if let Value::Object(fields) = fields {
        object.extend(fields);
    }
    Value::Object(object).to_string()
}

fn body_fields(body: &EventBody) -> (&'static str, Value) {
    match body {
        EventBody::MessageIn(m) => (
            "message_in",
            json!({
                "id": m.id,
                "conversation": m.conversation,
                "thread": m.thread,
                "sender": m.sender,
                "sender_name": m.sender_name,
                "text": m.text,
                "timestamp_ms": m.timestamp_ms,
            }),
        ),
        EventBody::MessageOut(m) => (
            "message_out",
            json!({
                "conversation": m.conversation,
                "thread": m.thread,
                "text": m.text,
                "reply_to": m.reply_to,
            }),
        ),
        EventBody::ToolCall(call) => ("tool_call", tool_call_fields(call)),
        EventBody::LlmUsage(usage) => (
            "llm_usage",
            json!({
                "model": usage.model,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cost_usd": usage.cost_usd,
            }),
        ),
        EventBody::PluginFault(message) => ("plugin_fault", json!({ "message": message })),
        EventBody::Error(message) => ("error", json!({ "message": message })),
    }
}

fn tool_call_fields(call: &ToolCall) -> Value {
    // Arguments are JSON text; embed them as JSON when they parse, so the log stays queryable.
    let args = serde_json::from_str::<Value>(&call.args_json)
        .unwrap_or_else(|_| Value::String(call.args_json.clone()));
    let mut fields = json!({
        "tool": call.tool,
        "args": args,
        "duration_ms": call.duration_ms,
    });
    let outcome = match &call.outcome {
        None => json!({ "status": "pending" }),
        Some(Ok(result)) => json!({ "status": "ok", "result": result }),
        Some(Err(error)) => json!({ "status": "error", "error": error }),
    };
    if let (Value::Object(fields), Value::Object(outcome)) = (&mut fields, outcome) {
        fields.extend(outcome);
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_plugin_sdk::types::{LlmUsage, Message};

    fn event(body: EventBody) -> Event {
        Event {
            timestamp_ms: 1_700_000_000_000,
            workspace: Some("ws".into()),
            session: None,
            body,
        }
    }

    fn parsed(event: &Event) -> Value {
        let line = to_line(event);
        assert!(!line.contains('\n'));
        serde_json::from_str(&line).expect("line is JSON")
    }

    #[test]
    fn file_names() {
        assert_eq!(file_name(None), Ok(DEFAULT_FILE));
        assert_eq!(file_name(Some("audit.jsonl")), Ok("audit.jsonl"));
        for bad in ["", ".", "a/b", "/etc/passwd", "..", "x..y", "a\\b"] {
            assert!(file_name(Some(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn message_in() {
        let value = parsed(&event(EventBody::MessageIn(Message {
            id: "m1".into(),
            conversation: "c".into(),
            thread: None,
            sender: "u".into(),
            sender_name: Some("Ann".into()),
            text: "hi\nthere".into(),
            timestamp_ms: 5,
            files: Vec::new(),
        })));
        assert_eq!(
            value,
            json!({
                "ts": 1_700_000_000_000u64, "workspace": "ws", "session": null,
                "type": "message_in", "id": "m1", "conversation": "c", "thread": null,
                "sender": "u", "sender_name": "Ann", "text": "hi\nthere", "timestamp_ms": 5,
            })
        );
    }

    #[test]
    fn tool_call() {
        let value = parsed(&event(EventBody::ToolCall(ToolCall {
            tool: "skill-calc.evaluate".into(),
            args_json: r#"{"expression":"1+1"}"#.into(),
            outcome: Some(Err("boom".into())),
            duration_ms: Some(3),
        })));
        assert_eq!(value["type"], "tool_call");
        assert_eq!(value["args"]["expression"], "1+1");
        assert_eq!(value["status"], "error");
        assert_eq!(value["error"], "boom");
        assert_eq!(value["duration_ms"], 3);

        let value = parsed(&event(EventBody::ToolCall(ToolCall {
            tool: "t".into(),
            args_json: "not json".into(),
            outcome: None,
            duration_ms: None,
        })));
        assert_eq!(value["args"], "not json");
        assert_eq!(value["status"], "pending");
    }

    #[test]
    fn other_kinds() {
        let value = parsed(&event(EventBody::LlmUsage(LlmUsage {
            model: "m".into(),
            input_tokens: 10,
            output_tokens: 20,
            cost_usd: None,
        })));
        assert_eq!(value["type"], "llm_usage");
        assert_eq!(value["output_tokens"], 20);
        assert_eq!(value["cost_usd"], Value::Null);
        assert_eq!(
            parsed(&event(EventBody::PluginFault("x".into())))["type"],
            "plugin_fault"
        );
        let value = parsed(&event(EventBody::Error("bad".into())));
        assert_eq!(
            (&value["type"], &value["message"]),
            (&json!("error"), &json!("bad"))
        );
    }
}
