//! One model call: a streaming `POST /v1/chat/completions` to the gateway,
//! its content deltas handed on as they arrive, its `tool_calls` fragments
//! put together by index.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::gateway::{Gateway, GatewayError};
use super::sse::SseParser;
use crate::cancel::Cancel;

/// Most bytes of one model answer (stream included) before it is refused.
const MAX_STREAM_BYTES: usize = 16 * 1024 * 1024;
/// Most tool calls in one model answer.
const MAX_TOOL_CALLS: usize = 64;
/// Longest one model call may take, however steadily it streams.
const MAX_CALL_DURATION: Duration = Duration::from_secs(30 * 60);

/// What the model answered in one call.
#[derive(Debug, Default)]
pub struct Completion {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    /// `(prompt_tokens, completion_tokens)`, when the gateway reported them.
    pub usage: Option<(u64, u64)>,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The model's raw JSON text.
    pub arguments: String,
}

#[derive(Debug)]
pub enum LlmError {
    /// The gateway refused or failed the call; its message.
    Gateway(String),
    Unreachable(String),
    /// The answer could not be understood.
    ModelOutput(String),
    Cancelled,
}

impl From<GatewayError> for LlmError {
    fn from(e: GatewayError) -> Self {
        match e {
            GatewayError::Unreachable(message) => LlmError::Unreachable(message),
            GatewayError::Status { message, .. } => LlmError::Gateway(message),
            GatewayError::Cancelled => LlmError::Cancelled,
        }
    }
}

/// The request body of one call.
pub fn request_body(
    model: &str,
    messages: &[Value],
    tools: &[Value],
    max_tokens: Option<u32>,
) -> Value {
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    // An empty `tools` array is an error for some providers.
    if !tools.is_empty() {
        body["tools"] = Value::from(tools.to_vec());
    }
    if let Some(max_tokens) = max_tokens {
        body["max_tokens"] = Value::from(max_tokens);
    }
    body
}

impl Completion {
    /// The assistant message in the OpenAI shape.
    pub fn message(&self) -> Value {
        if self.tool_calls.is_empty() {
            return json!({"role": "assistant", "content": self.text});
        }
        let calls: Vec<Value> = self
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                })
            })
            .collect();
        let content = if self.text.is_empty() {
            Value::Null
        } else {
            Value::from(self.text.as_str())
        };
        json!({"role": "assistant", "content": content, "tool_calls": calls})
    }
}

/// Calls the model. `on_text` gets each content delta and returns false when
/// nobody listens any more (the call is then abandoned as cancelled).
/// `idle` bounds the wait for the answer and between two pieces of it.
pub async fn complete(
    gateway: &Gateway,
    body: &Value,
    idle: Duration,
    cancel: &Cancel<'_>,
    on_text: &mut dyn FnMut(&str) -> bool,
) -> Result<Completion, LlmError> {
    let headers = [("accept", "text/event-stream, application/json")];
    let mut reply = gateway
        .post("/v1/chat/completions", body, &headers, idle, cancel)
        .await?;
    let mut assembler = Assembler::default();
    if !reply.content_type.starts_with("text/event-stream") {
        // A complete (non-streamed) answer, e.g. one served from a cache.
        let bytes = reply
            .read_all(MAX_STREAM_BYTES + 1, gateway, idle, cancel)
            .await?;
        if bytes.len() > MAX_STREAM_BYTES {
            return Err(too_long());
        }
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            LlmError::ModelOutput(format!("the gateway's answer is not valid JSON: {e}"))
        })?;
        assembler.complete_answer(&value, on_text)?;
        return assembler.finish(true);
    }
    let mut parser = SseParser::new(MAX_STREAM_BYTES);
    let mut received = 0usize;
    let end = Instant::now() + MAX_CALL_DURATION;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LlmError::Unreachable(format!(
                "the model's answer took longer than {} minutes",
                MAX_CALL_DURATION.as_secs() / 60
            )));
        }
        let Some(chunk) = reply.next_chunk(gateway, idle.min(left), cancel).await? else {
            break;
        };
        received += chunk.len();
        if received > MAX_STREAM_BYTES {
            return Err(too_long());
        }
        let events = parser.feed(&chunk).map_err(LlmError::ModelOutput)?;
        for data in events {
            if assembler.event(&data, on_text)? {
                return assembler.finish(true);
            }
        }
    }
    if let Some(data) = parser.finish()
        && assembler.event(&data, on_text)?
    {
        return assembler.finish(true);
    }
    assembler.finish(false)
}

fn too_long() -> LlmError {
    LlmError::ModelOutput(format!(
        "the model's answer exceeds {} MiB",
        MAX_STREAM_BYTES / (1024 * 1024)
    ))
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Puts a streamed answer together.
#[derive(Debug, Default)]
struct Assembler {
    completion: Completion,
    calls: BTreeMap<u64, PartialCall>,
}

impl Assembler {
    /// Takes one event's data; true at `[DONE]`.
    fn event(
        &mut self,
        data: &str,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<bool, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            LlmError::ModelOutput(format!(
                "the model's stream holds an event that is not JSON ({e}): {}",
                preview(data)
            ))
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            let message = error
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| error.to_string(), str::to_string);
            return Err(LlmError::Gateway(message));
        }
        self.usage(&chunk);
        let Some(choice) = first_choice(&chunk) else {
            return Ok(false);
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.completion.finish_reason = Some(reason.to_string());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(false);
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.completion.text.push_str(text);
            if !on_text(text) {
                return Err(LlmError::Cancelled);
            }
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                self.tool_call_delta(call)?;
            }
        }
        Ok(false)
    }

    /// Takes a complete chat-completion object.
    fn complete_answer(
        &mut self,
        answer: &Value,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<(), LlmError> {
        self.usage(answer);
        let Some(choice) = first_choice(answer) else {
            return Err(LlmError::ModelOutput(format!(
                "the gateway's answer has no choices: {}",
                preview(&answer.to_string())
            )));
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.completion.finish_reason = Some(reason.to_string());
        }
        let message = choice.get("message").unwrap_or(&Value::Null);
        if let Some(text) = message.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.completion.text.push_str(text);
            if !on_text(text) {
                return Err(LlmError::Cancelled);
            }
        }
        for call in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.tool_call_delta(call)?;
        }
        Ok(())
    }

    fn usage(&mut self, chunk: &Value) {
        let Some(usage) = chunk.get("usage").and_then(Value::as_object) else {
            return;
        };
        let count = |usage: &Map<String, Value>, key: &str| {
            usage.get(key).and_then(Value::as_u64).unwrap_or(0)
        };
        self.completion.usage = Some((
            count(usage, "prompt_tokens"),
            count(usage, "completion_tokens"),
        ));
    }

    /// One streamed fragment of a tool call. Fragments without an `index`
    /// (some providers) start a new call when they bring a new `id`, else
    /// continue the last one.
    fn tool_call_delta(&mut self, call: &Value) -> Result<(), LlmError> {
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let index = match call.get("index").and_then(Value::as_u64) {
            Some(index) => index,
            None => {
                let last = self.calls.last_key_value();
                match (last, id) {
                    (Some((&index, known)), Some(id)) if known.id.as_deref() == Some(id) => index,
                    (Some((&index, _)), None) => index,
                    (Some((&index, _)), Some(_)) => index + 1,
                    (None, _) => 0,
                }
            }
        };
        if !self.calls.contains_key(&index) && self.calls.len() >= MAX_TOOL_CALLS {
            return Err(LlmError::ModelOutput(format!(
                "the model asked for more than {MAX_TOOL_CALLS} tool calls at once"
            )));
        }
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = id {
            entry.id = Some(id.to_string());
        }
        if let Some(function) = call.get("function") {
            if let Some(name) = function.get("name").and_then(Value::as_str) {
                // Usually whole in the first fragment; some providers repeat it.
                if entry.name != name {
                    entry.name.push_str(name);
                }
            }
            match function.get("arguments") {
                Some(Value::String(fragment)) => entry.arguments.push_str(fragment),
                // Some providers send the arguments as an object.
                Some(value @ Value::Object(_)) => entry.arguments.push_str(&value.to_string()),
                _ => {}
            }
        }
        Ok(())
    }

    /// The completion; `done` when the stream ended properly.
    fn finish(mut self, done: bool) -> Result<Completion, LlmError> {
        if !done && self.completion.finish_reason.is_none() {
            return Err(LlmError::ModelOutput(
                "the model's stream ended before the answer was complete (no finish_reason, no [DONE])"
                    .into(),
            ));
        }
        self.completion.tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(n, (_, call))| ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{n}")),
                name: call.name,
                arguments: call.arguments,
            })
            .collect();
        Ok(self.completion)
    }
}

fn first_choice(chunk: &Value) -> Option<&Value> {
    let choices = chunk.get("choices")?.as_array()?;
    choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
}

fn preview(text: &str) -> String {
    let end = text.floor_char_boundary(200);
    if end < text.len() {
        format!("{}...", &text[..end])
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(events: &[&str]) -> Result<(Completion, String), LlmError> {
        let mut assembler = Assembler::default();
        let mut streamed = String::new();
        let mut on_text = |t: &str| {
            streamed.push_str(t);
            true
        };
        for data in events {
            if assembler.event(data, &mut on_text)? {
                return Ok((assembler.finish(true)?, streamed));
            }
        }
        Ok((assembler.finish(false)?, streamed))
    }

    #[test]
    fn tool_calls_by_index() {
        let (completion, _) = assemble(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"read","arguments":""}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"glob","arguments":"{}"}}]},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"x\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#,
            "[DONE]",
        ])
        .unwrap();
        assert_eq!(
            completion.tool_calls,
            vec![
                ToolCall {
                    id: "call_a".into(),
                    name: "read".into(),
                    arguments: r#"{"path":"x"}"#.into()
                },
                ToolCall {
                    id: "call_b".into(),
                    name: "glob".into(),
                    arguments: "{}".into()
                },
            ]
        );
        assert_eq!(completion.usage, Some((7, 3)));
        assert_eq!(completion.message()["content"], Value::Null);
        assert_eq!(
            completion.message()["tool_calls"][1]["function"]["name"],
            "glob"
        );
    }

    #[test]
    fn calls_without_index_or_id() {
        let (completion, text) = assemble(&[
            r#"{"choices":[{"delta":{"content":"ok","tool_calls":[{"function":{"name":"bash","arguments":{"command":"ls"}}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"x2","function":{"name":"read","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        ])
        .unwrap();
        assert_eq!(text, "ok");
        assert_eq!(completion.tool_calls.len(), 2);
        assert_eq!(completion.tool_calls[0].id, "call_0");
        assert_eq!(completion.tool_calls[0].arguments, r#"{"command":"ls"}"#);
        assert_eq!(completion.tool_calls[1].id, "x2");
    }

    #[test]
    fn bad_streams() {
        assert!(matches!(
            assemble(&["{not json"]),
            Err(LlmError::ModelOutput(_))
        ));
        assert!(matches!(
            assemble(&[r#"{"choices":[{"delta":{"content":"cut"}}]}"#]),
            Err(LlmError::ModelOutput(_))
        ));
        assert!(matches!(
            assemble(&[r#"{"error":{"message":"upstream failed"}}"#]),
            Err(LlmError::Gateway(m)) if m == "upstream failed"
        ));
        let many: Vec<String> = (0..=MAX_TOOL_CALLS)
            .map(|i| {
                format!(
                    r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{i},"id":"c{i}"}}]}}}}]}}"#
                )
            })
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(matches!(assemble(&many), Err(LlmError::ModelOutput(_))));
    }

    #[test]
    fn body_shape() {
        let body = request_body("m", &[json!({"role":"user","content":"hi"})], &[], Some(5));
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["include_usage"], true);
        assert_eq!(body["max_tokens"], 5);
        assert!(body.get("tools").is_none());
    }
}
