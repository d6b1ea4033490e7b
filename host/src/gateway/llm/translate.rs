//! The gateway's own Anthropic-style endpoint (`POST /v1/messages`), served
//! over any provider: Anthropic request → OpenAI request, and OpenAI answers
//! (whole or streamed) → Anthropic shapes.

use std::collections::VecDeque;

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use serde_json::{Map, Value, json};

use super::error::LlmError;

fn bad(message: impl Into<String>) -> LlmError {
    LlmError::BadRequest(message.into())
}

/// Text of Anthropic content: a string, or its `text` blocks joined.
fn anthropic_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn image_part(block: &Value, at: &str) -> Result<Value, LlmError> {
    let source = block.get("source").unwrap_or(&Value::Null);
    let url = match source.get("type").and_then(Value::as_str) {
        Some("base64") => {
            let media = source
                .get("media_type")
                .and_then(Value::as_str)
                .unwrap_or("image/png");
            let data = source.get("data").and_then(Value::as_str).unwrap_or("");
            format!("data:{media};base64,{data}")
        }
        Some("url") => source
            .get("url")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        _ => return Err(bad(format!("{at}: unsupported image source"))),
    };
    Ok(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// An Anthropic Messages request (as sent to the gateway's `/v1/messages`)
/// → an OpenAI chat request for [`super::LlmRouter::chat`]. `model` is kept
/// (it is a gateway alias). `system` becomes a system message, `tool_use`
/// blocks `tool_calls`, `tool_result` blocks `role: tool` messages; tools
/// and `tool_choice` are mapped; a streaming request asks for usage.
pub fn anthropic_request_to_openai(request: Value) -> Result<Value, LlmError> {
    let Value::Object(body) = request else {
        return Err(bad("the request body must be a JSON object"));
    };
    let model = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(bad("`model` must be a non-empty string")),
    };
    let Some(Value::Array(input)) = body.get("messages") else {
        return Err(bad("`messages` must be an array"));
    };
    let mut messages = Vec::new();
    match body.get("system") {
        None | Some(Value::Null) => {}
        Some(system @ (Value::String(_) | Value::Array(_))) => {
            let text = anthropic_text(Some(system));
            if !text.is_empty() {
                messages.push(json!({"role": "system", "content": text}));
            }
        }
        Some(_) => return Err(bad("`system` must be a string or an array of text blocks")),
    }
    for (i, message) in input.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = message.get("role").and_then(Value::as_str);
        let content = message.get("content");
        match (role, content) {
            (Some(role @ ("user" | "assistant")), Some(Value::String(text))) => {
                messages.push(json!({"role": role, "content": text}));
            }
            (Some("user"), Some(Value::Array(blocks))) => {
                let mut parts = Vec::new();
                for (j, block) in blocks.iter().enumerate() {
                    let at = format!("{at}.content[{j}]");
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => parts.push(json!({
                            "type": "text",
                            "text": block.get("text").and_then(Value::as_str).unwrap_or(""),
                        })),
                        Some("image") => parts.push(image_part(block, &at)?),
                        Some("tool_result") => {
                            let id = block
                                .get("tool_use_id")
                                .and_then(Value::as_str)
                                .ok_or_else(|| bad(format!("{at}: `tool_use_id` is required")))?;
                            let mut text = anthropic_text(block.get("content"));
                            if block.get("is_error") == Some(&Value::Bool(true)) {
                                text = format!("Error: {text}");
                            }
                            messages
                                .push(json!({"role": "tool", "tool_call_id": id, "content": text}));
                        }
                        other => {
                            return Err(bad(format!(
                                "{at}: block type `{}` is not supported",
                                other.unwrap_or("?")
                            )));
                        }
                    }
                }
                if !parts.is_empty() {
                    let all_text = parts.iter().all(|p| p["type"] == "text");
                    let content = if all_text {
                        Value::String(anthropic_text(Some(&Value::Array(parts))))
                    } else {
                        Value::Array(parts)
                    };
                    messages.push(json!({"role": "user", "content": content}));
                }
            }
            (Some("assistant"), Some(Value::Array(blocks))) => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for block in blocks {
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            text.push_str(block.get("text").and_then(Value::as_str).unwrap_or(""))
                        }
                        Some("tool_use") => calls.push(json!({
                            "id": block.get("id").cloned().unwrap_or(Value::Null),
                            "type": "function",
                            "function": {
                                "name": block.get("name").cloned().unwrap_or(Value::Null),
                                "arguments": block.get("input").unwrap_or(&json!({})).to_string(),
                            },
                        })),
                        _ => {} // thinking blocks are not replayed
                    }
                }
                messages.push(super::openai::assistant_message(text, calls));
            }
            _ => {
                return Err(bad(format!(
                    "{at}: `role` must be user or assistant and `content` a string or an array"
                )));
            }
        }
    }

    let mut out = Map::new();
    out.insert("model".into(), Value::String(model));
    out.insert("messages".into(), Value::Array(messages));
    if let Some(n) = body.get("max_tokens").filter(|n| n.is_u64()) {
        out.insert("max_tokens".into(), n.clone());
    }
    for key in ["temperature", "top_p"] {
        if let Some(v) = body.get(key).filter(|v| v.is_number()) {
            out.insert(key.into(), v.clone());
        }
    }
    if let Some(stops) = body.get("stop_sequences").filter(|s| s.is_array()) {
        out.insert("stop".into(), stops.clone());
    }
    if let Some(user) = body
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .filter(|u| u.is_string())
    {
        out.insert("user".into(), user.clone());
    }
    if body.get("stream") == Some(&Value::Bool(true)) {
        out.insert("stream".into(), Value::Bool(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(Value::Array(tools)) = body.get("tools") {
        let mut converted = Vec::new();
        for (i, tool) in tools.iter().enumerate() {
            let name = tool.get("name").and_then(Value::as_str);
            let schema = tool.get("input_schema").filter(|s| s.is_object());
            let (Some(name), Some(schema)) = (name, schema) else {
                return Err(bad(format!(
                    "tools[{i}]: only custom tools with `name` and `input_schema` are supported"
                )));
            };
            let mut function = Map::new();
            function.insert("name".into(), name.into());
            if let Some(d) = tool.get("description").filter(|d| d.is_string()) {
                function.insert("description".into(), d.clone());
            }
            function.insert("parameters".into(), schema.clone());
            converted.push(json!({"type": "function", "function": function}));
        }
        if !converted.is_empty() {
            out.insert("tools".into(), Value::Array(converted));
        }
    }
    if let Some(choice) = body.get("tool_choice").filter(|c| c.is_object()) {
        let mapped = match choice.get("type").and_then(Value::as_str) {
            Some("auto") => Some(json!("auto")),
            Some("any") => Some(json!("required")),
            Some("none") => Some(json!("none")),
            Some("tool") => choice
                .get("name")
                .and_then(Value::as_str)
                .map(|name| json!({"type": "function", "function": {"name": name}})),
            _ => None,
        };
        if let Some(mapped) = mapped {
            out.insert("tool_choice".into(), mapped);
        }
        if choice.get("disable_parallel_tool_use") == Some(&Value::Bool(true)) {
            out.insert("parallel_tool_calls".into(), Value::Bool(false));
        }
    }
    Ok(Value::Object(out))
}

/// OpenAI `finish_reason` → Anthropic `stop_reason`.
pub fn stop_reason(finish_reason: Option<&str>) -> &'static str {
    match finish_reason {
        Some("length") => "max_tokens",
        Some("tool_calls") | Some("function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

fn message_id(openai_id: Option<&str>) -> String {
    match openai_id {
        Some(id) => format!("msg_{}", id.strip_prefix("chatcmpl-").unwrap_or(id)),
        None => "msg_pincer".to_owned(),
    }
}

fn count(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64).unwrap_or(0)
}

/// Tool-call arguments → `input`; non-object arguments are kept under
/// `"arguments"`.
fn input_of(arguments: Option<&Value>) -> Value {
    match arguments.and_then(Value::as_str) {
        Some(s) if s.trim().is_empty() => json!({}),
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({ "arguments": s }),
        },
        None => json!({}),
    }
}

/// An OpenAI `chat.completion` → an Anthropic `message`.
pub fn openai_response_to_anthropic(response: Value) -> Value {
    let choice = response.pointer("/choices/0").unwrap_or(&Value::Null);
    let message = choice.get("message").unwrap_or(&Value::Null);
    let mut content = Vec::new();
    if let Some(text) = message.get("content").and_then(Value::as_str)
        && !text.is_empty()
    {
        content.push(json!({"type": "text", "text": text}));
    }
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for call in calls {
            content.push(json!({
                "type": "tool_use",
                "id": call.get("id").cloned().unwrap_or(Value::Null),
                "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
                "input": input_of(call.pointer("/function/arguments")),
            }));
        }
    }
    let usage = response.get("usage").unwrap_or(&Value::Null);
    json!({
        "id": message_id(response.get("id").and_then(Value::as_str)),
        "type": "message",
        "role": "assistant",
        "model": response.get("model").cloned().unwrap_or(Value::Null),
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason").and_then(Value::as_str)),
        "stop_sequence": null,
        "usage": {
            "input_tokens": count(usage.get("prompt_tokens")),
            "output_tokens": count(usage.get("completion_tokens")),
        },
    })
}

/// One Anthropic stream event: written as `event: {event}\ndata: {data}\n\n`.
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicEvent {
    pub event: &'static str,
    pub data: Value,
}

impl AnthropicEvent {
    pub fn to_sse(&self) -> String {
        format!("event: {}\ndata: {}\n\n", self.event, self.data)
    }

    /// The `event: error` that ends a stream that failed.
    pub fn error(error: &LlmError) -> Self {
        AnthropicEvent {
            event: "error",
            data: error.to_anthropic_error().1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Text(u64),
    /// Anthropic block index, OpenAI tool-call index.
    Tool(u64, u64),
}

/// OpenAI chunks → Anthropic stream events (`message_start`,
/// `content_block_start/delta/stop`, `message_delta`, `message_stop`). Feed
/// every chunk to [`Self::push`], then call [`Self::finish`] once.
#[derive(Debug)]
pub struct OpenAiToAnthropicStream {
    model: String,
    started: bool,
    open: Option<Block>,
    next_block: u64,
    finish_reason: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    finished: bool,
}

impl OpenAiToAnthropicStream {
    /// `model` is what `message_start` names (the alias the client asked for).
    pub fn new(model: &str) -> Self {
        OpenAiToAnthropicStream {
            model: model.to_owned(),
            started: false,
            open: None,
            next_block: 0,
            finish_reason: None,
            input_tokens: 0,
            output_tokens: 0,
            finished: false,
        }
    }

    fn start(&mut self, id: Option<&str>, out: &mut Vec<AnthropicEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        out.push(AnthropicEvent {
            event: "message_start",
            data: json!({"type": "message_start", "message": {
                "id": message_id(id), "type": "message", "role": "assistant",
                "model": self.model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }}),
        });
    }

    fn close(&mut self, out: &mut Vec<AnthropicEvent>) {
        if let Some(Block::Text(index) | Block::Tool(index, _)) = self.open.take() {
            out.push(AnthropicEvent {
                event: "content_block_stop",
                data: json!({"type": "content_block_stop", "index": index}),
            });
        }
    }

    fn open_block(&mut self, block: Value, out: &mut Vec<AnthropicEvent>) -> u64 {
        self.close(out);
        let index = self.next_block;
        self.next_block += 1;
        out.push(AnthropicEvent {
            event: "content_block_start",
            data: json!({"type": "content_block_start", "index": index, "content_block": block}),
        });
        index
    }

    pub fn push(&mut self, chunk: &Value) -> Vec<AnthropicEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.start(chunk.get("id").and_then(Value::as_str), &mut out);
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.input_tokens = count(usage.get("prompt_tokens"));
            self.output_tokens = count(usage.get("completion_tokens"));
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return out;
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            let index = match self.open {
                Some(Block::Text(index)) => index,
                _ => self.open_block(json!({"type": "text", "text": ""}), &mut out),
            };
            self.open = Some(Block::Text(index));
            out.push(AnthropicEvent {
                event: "content_block_delta",
                data: json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": text}}),
            });
        }
        if let Some(Value::Array(calls)) = delta.get("tool_calls") {
            for call in calls {
                let tool = call.get("index").and_then(Value::as_u64).unwrap_or(0);
                let index = match self.open {
                    Some(Block::Tool(index, open_tool)) if open_tool == tool => index,
                    _ => {
                        let block = json!({
                            "type": "tool_use",
                            "id": call.get("id").cloned().unwrap_or_else(|| json!(format!("toolu_{tool}"))),
                            "name": call.pointer("/function/name").cloned().unwrap_or(json!("")),
                            "input": {},
                        });
                        let index = self.open_block(block, &mut out);
                        self.open = Some(Block::Tool(index, tool));
                        index
                    }
                };
                if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str)
                    && !args.is_empty()
                {
                    out.push(AnthropicEvent {
                        event: "content_block_delta",
                        data: json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": args}}),
                    });
                }
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        out
    }

    /// The closing events (`content_block_stop`, `message_delta` with stop
    /// reason and usage, `message_stop`). Idempotent.
    pub fn finish(&mut self) -> Vec<AnthropicEvent> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.start(None, &mut out);
        self.close(&mut out);
        self.finished = true;
        out.push(AnthropicEvent {
            event: "message_delta",
            data: json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(self.finish_reason.as_deref()), "stop_sequence": null},
                "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}}),
        });
        out.push(AnthropicEvent {
            event: "message_stop",
            data: json!({"type": "message_stop"}),
        });
        out
    }
}

/// Adapts a router stream ([`super::ChatOutcome::Stream`]'s `events`) to
/// Anthropic events. An `Err` item is passed on and ends the stream (render
/// it with [`AnthropicEvent::error`]); no `message_stop` follows it.
pub fn openai_stream_to_anthropic(
    events: BoxStream<'static, Result<Value, LlmError>>,
    model: &str,
) -> BoxStream<'static, Result<AnthropicEvent, LlmError>> {
    struct State {
        inner: BoxStream<'static, Result<Value, LlmError>>,
        adapter: OpenAiToAnthropicStream,
        pending: VecDeque<AnthropicEvent>,
        done: bool,
    }
    let state = State {
        inner: events,
        adapter: OpenAiToAnthropicStream::new(model),
        pending: VecDeque::new(),
        done: false,
    };
    stream::unfold(state, |mut s| async move {
        loop {
            if let Some(event) = s.pending.pop_front() {
                return Some((Ok(event), s));
            }
            if s.done {
                return None;
            }
            match s.inner.next().await {
                Some(Ok(chunk)) => s.pending.extend(s.adapter.push(&chunk)),
                Some(Err(e)) => {
                    s.done = true;
                    return Some((Err(e), s));
                }
                None => {
                    s.done = true;
                    s.pending.extend(s.adapter.finish());
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_request_becomes_openai() {
        let out = anthropic_request_to_openai(json!({
            "model": "default",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "And tomorrow?"}]}
            ],
            "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"],
            "stream": true
        }))
        .unwrap();
        assert_eq!(out["model"], "default");
        assert_eq!(out["max_tokens"], 100);
        assert_eq!(out["stream_options"]["include_usage"], true);
        let m = out["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(m[1], json!({"role": "user", "content": "Weather?"}));
        assert_eq!(m[2]["content"], "Checking.");
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "And tomorrow?"}));
        assert_eq!(
            out["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        assert_eq!(out["tool_choice"], "required");
        assert_eq!(out["parallel_tool_calls"], false);
        assert_eq!(out["stop"], json!(["END"]));
    }

    #[test]
    fn bad_anthropic_requests() {
        for body in [
            json!("x"),
            json!({"messages": []}),
            json!({"model": "m"}),
            json!({"model": "m", "messages": [{"role": "system", "content": "x"}]}),
            json!({"model": "m", "messages": [], "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
        ] {
            assert!(matches!(
                anthropic_request_to_openai(body),
                Err(LlmError::BadRequest(_))
            ));
        }
    }

    #[test]
    fn openai_response_becomes_anthropic() {
        let out = openai_response_to_anthropic(json!({
            "id": "chatcmpl-abc", "object": "chat.completion", "model": "default",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        }));
        assert_eq!(out["id"], "msg_abc");
        assert_eq!(out["stop_reason"], "tool_use");
        assert_eq!(out["content"][0]["type"], "tool_use");
        assert_eq!(out["content"][0]["input"], json!({"city": "Paris"}));
        assert_eq!(out["usage"], json!({"input_tokens": 3, "output_tokens": 4}));
    }

    #[test]
    fn stream_adapter_emits_the_anthropic_event_sequence() {
        let chunks = [
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "lo"}}]}),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]}}]}),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": "{\"a\":1}"}}]}}]}),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}}),
        ];
        let mut adapter = OpenAiToAnthropicStream::new("default");
        let mut events = Vec::new();
        for c in &chunks {
            events.extend(adapter.push(c));
        }
        events.extend(adapter.finish());
        let names: Vec<&str> = events.iter().map(|e| e.event).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[0].data["message"]["id"], "msg_1");
        assert_eq!(events[5].data["content_block"]["name"], "f");
        assert_eq!(events[5].data["index"], 1);
        assert_eq!(events[6].data["delta"]["partial_json"], "{\"a\":1}");
        assert_eq!(events[8].data["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[8].data["usage"]["output_tokens"], 6);
        assert!(
            events[1]
                .to_sse()
                .starts_with("event: content_block_start\ndata: {")
        );
        assert!(adapter.finish().is_empty());
    }
}
