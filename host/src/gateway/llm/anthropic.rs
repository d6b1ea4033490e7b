//! The Anthropic provider: OpenAI request → Messages API request, and
//! Messages API answers (whole or streamed) → OpenAI shapes.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::error::LlmError;
use super::openai::{ChatRequest, StreamStep, assistant_message, error_message, usage_json};
use super::sse::SseEvent;
use super::types::Usage;

/// The system instruction that stands in for OpenAI's JSON mode.
pub const JSON_MODE_INSTRUCTION: &str =
    "Respond only with a single valid JSON object, with no text before or after it.";

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn bad(message: impl Into<String>) -> LlmError {
    LlmError::BadRequest(message.into())
}

/// The text of OpenAI message content: a string, or the `text` parts of an
/// array joined by newlines.
pub(crate) fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn image_block(part: &Value, at: &str) -> Result<Value, LlmError> {
    let url = part
        .get("image_url")
        .and_then(|u| u.get("url").or(Some(u)))
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{at}: `image_url.url` is required")))?;
    if let Some(rest) = url.strip_prefix("data:") {
        let (media_type, data) = rest
            .split_once(";base64,")
            .ok_or_else(|| bad(format!("{at}: only base64 data URLs are supported")))?;
        Ok(
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}),
        )
    } else {
        Ok(json!({"type": "image", "source": {"type": "url", "url": url}}))
    }
}

/// OpenAI content → Anthropic content blocks (empty text is dropped:
/// Anthropic rejects empty text blocks).
fn content_blocks(content: Option<&Value>, at: &str) -> Result<Vec<Value>, LlmError> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(Value::Array(parts)) => {
            let mut blocks = Vec::new();
            for (j, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = part.get("text").and_then(Value::as_str).unwrap_or("");
                        if !text.is_empty() {
                            blocks.push(json!({"type": "text", "text": text}));
                        }
                    }
                    Some("image_url") => blocks.push(image_block(part, &format!("{at}[{j}]"))?),
                    other => {
                        return Err(bad(format!(
                            "{at}[{j}]: content part type `{}` cannot be sent to an anthropic/ deployment",
                            other.unwrap_or("?")
                        )));
                    }
                }
            }
            Ok(blocks)
        }
        Some(_) => Err(bad(format!("{at}: `content` must be a string or an array"))),
    }
}

/// Tool-call arguments (a JSON string) → the `input` object. Arguments that
/// are not a JSON object are kept under `"arguments"` rather than dropped.
fn tool_input(arguments: Option<&Value>) -> Value {
    match arguments {
        Some(Value::String(s)) if s.trim().is_empty() => json!({}),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => json!({ "arguments": s }),
        },
        Some(v @ Value::Object(_)) => v.clone(),
        _ => json!({}),
    }
}

fn push_turn(turns: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, blocks: Vec<Value>) {
    if blocks.is_empty() {
        return;
    }
    match turns.last_mut() {
        Some((last, existing)) if *last == role => existing.extend(blocks),
        _ => turns.push((role, blocks)),
    }
}

/// OpenAI chat request → Anthropic Messages request. System and developer
/// messages become `system`; tool calls become `tool_use` blocks and `tool`
/// messages `tool_result` blocks; consecutive turns of one role are merged;
/// JSON mode becomes a system instruction.
pub(crate) fn request_from_openai(
    request: &ChatRequest,
    upstream_model: &str,
) -> Result<Value, LlmError> {
    let body = &request.body;
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for (i, message) in messages.iter().enumerate() {
        let at = format!("messages[{i}]");
        let content = message.get("content");
        match message.get("role").and_then(Value::as_str).unwrap_or("") {
            "system" | "developer" => {
                let text = text_of(content);
                if !text.is_empty() {
                    system.push(text);
                }
            }
            "user" => push_turn(&mut turns, "user", content_blocks(content, &at)?),
            "assistant" => {
                let mut blocks = content_blocks(content, &at)?;
                if let Some(Value::Array(calls)) = message.get("tool_calls") {
                    for (j, call) in calls.iter().enumerate() {
                        let id = call.get("id").and_then(Value::as_str).ok_or_else(|| {
                            bad(format!("{at}.tool_calls[{j}]: `id` is required"))
                        })?;
                        let name = call
                            .pointer("/function/name")
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                bad(format!("{at}.tool_calls[{j}]: `function.name` is required"))
                            })?;
                        let input = tool_input(call.pointer("/function/arguments"));
                        blocks.push(
                            json!({"type": "tool_use", "id": id, "name": name, "input": input}),
                        );
                    }
                }
                push_turn(&mut turns, "assistant", blocks);
            }
            "tool" => {
                let id = message
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{at}: `tool_call_id` is required")))?;
                let block =
                    json!({"type": "tool_result", "tool_use_id": id, "content": text_of(content)});
                push_turn(&mut turns, "user", vec![block]);
            }
            role => return Err(bad(format!("{at}: unsupported role `{role}`"))),
        }
    }
    match body
        .get("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
    {
        Some("json_object") => system.push(JSON_MODE_INSTRUCTION.to_owned()),
        Some("json_schema") => {
            let schema = body
                .get("response_format")
                .and_then(|f| f.pointer("/json_schema/schema"))
                .cloned()
                .unwrap_or(Value::Null);
            system.push(format!(
                "{JSON_MODE_INSTRUCTION} The object must match this JSON schema: {schema}"
            ));
        }
        _ => {}
    }

    let mut out = Map::new();
    out.insert("model".into(), Value::String(upstream_model.to_owned()));
    // The bound the budget reserved (the smaller client value, else the
    // default, `budget::DEFAULT_MAX_COMPLETION_TOKENS`).
    let max_tokens = crate::gateway::budget::completion_bound_in(body);
    out.insert("max_tokens".into(), max_tokens.into());
    let turns: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    out.insert("messages".into(), Value::Array(turns));
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    if request.stream {
        out.insert("stream".into(), Value::Bool(true));
    }
    if let Some(t) = body.get("temperature").and_then(Value::as_f64) {
        // OpenAI allows 0..2, Anthropic 0..1.
        out.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
    }
    if let Some(p) = body.get("top_p").and_then(Value::as_f64) {
        out.insert("top_p".into(), json!(p));
    }
    match body.get("stop") {
        Some(Value::String(s)) => {
            out.insert("stop_sequences".into(), json!([s]));
        }
        Some(Value::Array(stops)) => {
            let stops: Vec<&Value> = stops.iter().filter(|s| s.is_string()).collect();
            out.insert("stop_sequences".into(), json!(stops));
        }
        _ => {}
    }
    if let Some(user) = body.get("user").and_then(Value::as_str) {
        out.insert("metadata".into(), json!({ "user_id": user }));
    }
    let tools: Vec<Value> = body
        .get("tools")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|t| t.get("function"))
        .map(|f| {
            let mut tool = Map::new();
            tool.insert("name".into(), f.get("name").cloned().unwrap_or(Value::Null));
            if let Some(d) = f.get("description").filter(|d| d.is_string()) {
                tool.insert("description".into(), d.clone());
            }
            let schema = f
                .get("parameters")
                .filter(|p| p.is_object())
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            tool.insert("input_schema".into(), schema);
            Value::Object(tool)
        })
        .collect();
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
        let mut choice = match body.get("tool_choice") {
            Some(Value::String(s)) if s == "none" => Some(json!({"type": "none"})),
            Some(Value::String(s)) if s == "required" => Some(json!({"type": "any"})),
            Some(Value::String(s)) if s == "auto" => Some(json!({"type": "auto"})),
            Some(Value::Object(o)) => o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .map(|name| json!({"type": "tool", "name": name})),
            _ => None,
        };
        if body.get("parallel_tool_calls") == Some(&Value::Bool(false)) {
            let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
            if c.get("type").and_then(Value::as_str) != Some("none")
                && let Some(o) = c.as_object_mut()
            {
                o.insert("disable_parallel_tool_use".into(), Value::Bool(true));
            }
        }
        if let Some(choice) = choice {
            out.insert("tool_choice".into(), choice);
        }
    }
    Ok(Value::Object(out))
}

/// Anthropic `stop_reason` → OpenAI `finish_reason`.
pub fn finish_reason(stop_reason: Option<&str>) -> &'static str {
    match stop_reason {
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        Some("refusal") => "content_filter",
        _ => "stop",
    }
}

fn count(v: Option<&Value>) -> u32 {
    v.and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// Prompt tokens include cached input (written or read).
fn input_tokens(usage: &Value) -> u32 {
    count(usage.get("input_tokens"))
        .saturating_add(count(usage.get("cache_creation_input_tokens")))
        .saturating_add(count(usage.get("cache_read_input_tokens")))
}

/// Anthropic `message` → OpenAI `chat.completion` (model = alias) and usage.
pub(crate) fn response_to_openai(
    response: &Value,
    alias: &str,
    prompt_estimate: u32,
) -> Result<(Value, Usage), super::Malformed> {
    if response.get("type").and_then(Value::as_str) == Some("error") {
        let message = response.get("error").map(error_message).unwrap_or_default();
        return Err(super::Malformed::from(format!(
            "error in a 200 response: {message}"
        )));
    }
    let Some(Value::Array(blocks)) = response.get("content") else {
        return Err(super::Malformed::from("the response has no `content`"));
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => calls.push(json!({
                "id": block.get("id").cloned().unwrap_or(Value::Null),
                "type": "function",
                "function": {
                    "name": block.get("name").cloned().unwrap_or(Value::Null),
                    "arguments": block.get("input").unwrap_or(&json!({})).to_string(),
                }
            })),
            _ => {} // thinking blocks are not part of the OpenAI shape
        }
    }
    let usage = match response.get("usage").filter(|u| u.is_object()) {
        Some(u) => Usage {
            prompt_tokens: input_tokens(u),
            completion_tokens: count(u.get("output_tokens")),
        },
        None => Usage {
            prompt_tokens: prompt_estimate,
            completion_tokens: super::openai::estimate_tokens(&text),
        },
    };
    let message = assistant_message(text, calls);
    let id = response
        .get("id")
        .and_then(Value::as_str)
        .unwrap_or("anthropic");
    let finish = finish_reason(response.get("stop_reason").and_then(Value::as_str));
    Ok((
        json!({
            "id": format!("chatcmpl-{id}"),
            "object": "chat.completion",
            "created": now_secs(),
            "model": alias,
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
            "usage": usage_json(usage),
        }),
        usage,
    ))
}

/// Anthropic stream events → OpenAI chunks.
#[derive(Debug)]
pub(crate) struct AnthropicStream {
    alias: String,
    id: String,
    created: u64,
    include_usage: bool,
    /// Content block index → OpenAI tool-call index.
    tool_of_block: HashMap<u64, usize>,
    input_tokens: Option<u32>,
    output_tokens: Option<u32>,
    completion_chars: usize,
    finished: bool,
    stopped: bool,
}

impl AnthropicStream {
    pub fn new(alias: &str, include_usage: bool) -> Self {
        AnthropicStream {
            alias: alias.to_owned(),
            id: "chatcmpl-anthropic".into(),
            created: now_secs(),
            include_usage,
            tool_of_block: HashMap::new(),
            input_tokens: None,
            output_tokens: None,
            completion_chars: 0,
            finished: false,
            stopped: false,
        }
    }

    /// `message_stop` was seen.
    pub fn done(&self) -> bool {
        self.stopped
    }

    /// Ended cleanly enough: `message_stop`, or at least the final
    /// `message_delta` with its stop reason.
    pub fn complete(&self) -> bool {
        self.stopped || self.finished
    }

    pub fn usage(&self, prompt_estimate: u32) -> Usage {
        Usage {
            prompt_tokens: self.input_tokens.unwrap_or(prompt_estimate),
            completion_tokens: self.output_tokens.unwrap_or_else(|| {
                u32::try_from(self.completion_chars.div_ceil(4)).unwrap_or(u32::MAX)
            }),
        }
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.alias,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        })
    }

    pub fn on_event(&mut self, event: &SseEvent) -> Result<StreamStep, super::Malformed> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|_| "an Anthropic stream event is not JSON".to_owned())?;
        let kind = event
            .event
            .as_deref()
            .or_else(|| data.get("type").and_then(Value::as_str))
            .unwrap_or("");
        let mut out = Vec::new();
        match kind {
            "message_start" => {
                let message = data.get("message").unwrap_or(&Value::Null);
                if let Some(id) = message.get("id").and_then(Value::as_str) {
                    self.id = format!("chatcmpl-{id}");
                }
                if let Some(u) = message.get("usage").filter(|u| u.is_object()) {
                    self.input_tokens = Some(input_tokens(u));
                    if u.get("output_tokens").is_some() {
                        self.output_tokens = Some(count(u.get("output_tokens")));
                    }
                }
                out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            "content_block_start" => {
                let block = data.get("content_block").unwrap_or(&Value::Null);
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_use") => {
                        let tool = self.tool_of_block.len();
                        self.tool_of_block.insert(index, tool);
                        let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                        self.completion_chars += name.chars().count();
                        out.push(self.chunk(
                            json!({"tool_calls": [{
                                "index": tool,
                                "id": block.get("id").cloned().unwrap_or(Value::Null),
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }]}),
                            None,
                        ));
                    }
                    Some("text") => {
                        let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                        if !text.is_empty() {
                            self.completion_chars += text.chars().count();
                            out.push(self.chunk(json!({ "content": text }), None));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        self.completion_chars += text.chars().count();
                        out.push(self.chunk(json!({ "content": text }), None));
                    }
                    Some("input_json_delta") => {
                        let part = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        self.completion_chars += part.chars().count();
                        if let Some(tool) = self.tool_of_block.get(&index) {
                            out.push(self.chunk(
                                json!({"tool_calls": [{"index": tool, "function": {"arguments": part}}]}),
                                None,
                            ));
                        }
                    }
                    _ => {} // thinking, signatures, citations
                }
            }
            "message_delta" => {
                if let Some(u) = data.get("usage").filter(|u| u.is_object()) {
                    if u.get("output_tokens").is_some() {
                        self.output_tokens = Some(count(u.get("output_tokens")));
                    }
                    if u.get("input_tokens").is_some() {
                        self.input_tokens = Some(input_tokens(u));
                    }
                }
                if let Some(reason) = data.pointer("/delta/stop_reason").filter(|r| !r.is_null()) {
                    self.finished = true;
                    out.push(self.chunk(json!({}), Some(finish_reason(reason.as_str()))));
                }
            }
            "message_stop" => {
                self.stopped = true;
                if self.include_usage {
                    let usage = self.usage(0);
                    out.push(json!({
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.alias,
                        "choices": [],
                        "usage": usage_json(usage),
                    }));
                }
            }
            "error" => {
                let err = data.get("error").unwrap_or(&data);
                let status = match err.get("type").and_then(Value::as_str) {
                    Some("rate_limit_error") => 429,
                    Some("overloaded_error") => 529,
                    Some("invalid_request_error") => 400,
                    _ => 500,
                };
                return Ok(StreamStep::Error {
                    status,
                    message: error_message(err),
                });
            }
            _ => {} // ping, content_block_stop, unknown future events
        }
        Ok(StreamStep::Chunks(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::llm::openai::parse_chat_request;

    #[test]
    fn request_translation_covers_roles_tools_and_json_mode() {
        let req = parse_chat_request(json!({
            "model": "claude",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "user", "content": "Thanks"}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "description": "d",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": "required",
            "parallel_tool_calls": false,
            "response_format": {"type": "json_object"},
            "max_tokens": 99,
            "temperature": 1.5,
            "stop": "END",
            "stream": true
        }))
        .unwrap();
        let out = request_from_openai(&req, "claude-x").unwrap();
        assert_eq!(out["model"], "claude-x");
        assert_eq!(out["max_tokens"], 99);
        assert_eq!(out["temperature"], 1.0);
        assert_eq!(out["stream"], true);
        assert_eq!(out["stop_sequences"], json!(["END"]));
        let system = out["system"].as_str().unwrap();
        assert!(system.starts_with("Be brief."));
        assert!(system.contains(JSON_MODE_INSTRUCTION));
        let messages = out["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert_eq!(messages[0]["role"], "user");
        assert_eq!(
            messages[0]["content"][1]["source"]["media_type"],
            "image/png"
        );
        assert_eq!(messages[1]["content"][0]["type"], "tool_use");
        assert_eq!(messages[1]["content"][0]["input"], json!({"city": "Paris"}));
        // The tool result and the next user text are one user turn.
        assert_eq!(messages[2]["content"][0]["type"], "tool_result");
        assert_eq!(messages[2]["content"][0]["tool_use_id"], "call_1");
        assert_eq!(messages[2]["content"][0]["content"], "sunny");
        assert_eq!(messages[2]["content"][1]["text"], "Thanks");
        assert_eq!(
            out["tools"][0]["input_schema"]["properties"]["city"]["type"],
            "string"
        );
        assert_eq!(
            out["tool_choice"],
            json!({"type": "any", "disable_parallel_tool_use": true})
        );
    }

    #[test]
    fn response_translation_text_and_tool_use() {
        let (resp, usage) = response_to_openai(
            &json!({
                "id": "msg_1", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 2}
            }),
            "claude",
            0,
        )
        .unwrap();
        assert_eq!(resp["id"], "chatcmpl-msg_1");
        assert_eq!(resp["model"], "claude");
        assert_eq!(resp["choices"][0]["finish_reason"], "tool_calls");
        let message = &resp["choices"][0]["message"];
        assert_eq!(message["content"], "Let me check.");
        assert_eq!(message["tool_calls"][0]["function"]["name"], "weather");
        let args: Value = serde_json::from_str(
            message["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(args, json!({"city": "Paris"}));
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 12,
                completion_tokens: 5
            }
        );
        assert_eq!(resp["usage"]["total_tokens"], 17);
    }

    #[test]
    fn unsupported_content_is_a_clear_error() {
        let req = parse_chat_request(json!({
            "model": "c",
            "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]
        }))
        .unwrap();
        let err = request_from_openai(&req, "x").unwrap_err().to_string();
        assert!(err.contains("input_audio"), "{err}");
    }
}
