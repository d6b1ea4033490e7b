//! The internal shape, OpenAI Chat Completions: parsing the parts we route
//! on, preparing the body for OpenAI-style upstreams and normalising their
//! answers.

use serde_json::{Map, Value, json};

use super::error::LlmError;
use super::types::Usage;

/// A validated chat request. `body` is the client's JSON object, untouched.
#[derive(Debug, Clone)]
pub(crate) struct ChatRequest {
    pub alias: String,
    pub stream: bool,
    /// The client asked for `stream_options.include_usage`.
    pub include_usage: bool,
    pub body: Map<String, Value>,
    /// Rough prompt size, used when the upstream reports no usage.
    pub prompt_estimate: u32,
}

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool"];

fn bad(message: impl Into<String>) -> LlmError {
    LlmError::BadRequest(message.into())
}

/// Checks the fields the gateway routes on or translates: `model`,
/// `messages` (each an object with a known `role`), `stream`,
/// `stream_options` and `tools` (each `{type: "function", function: {name}}`).
pub(crate) fn parse_chat_request(request: Value) -> Result<ChatRequest, LlmError> {
    let Value::Object(body) = request else {
        return Err(bad("the request body must be a JSON object"));
    };
    let alias = match body.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(bad("`model` must be a non-empty string")),
    };
    let messages = match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        _ => return Err(bad("`messages` must be a non-empty array")),
    };
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str);
        match role {
            Some(r) if ROLES.contains(&r) => {}
            Some(r) => return Err(bad(format!("messages[{i}]: unsupported role `{r}`"))),
            None => return Err(bad(format!("messages[{i}]: `role` must be a string"))),
        }
    }
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("`stream` must be a boolean")),
    };
    let include_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(bad("`stream_options.include_usage` must be a boolean")),
        },
        Some(_) => return Err(bad("`stream_options` must be an object")),
    };
    match body.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => {
            for (i, tool) in tools.iter().enumerate() {
                if tool.get("type").and_then(Value::as_str) != Some("function") {
                    return Err(bad(format!("tools[{i}]: `type` must be \"function\"")));
                }
                if tool
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(bad(format!("tools[{i}]: `function.name` is required")));
                }
            }
        }
        Some(_) => return Err(bad("`tools` must be an array")),
    }
    let prompt_estimate = estimate_json_tokens(messages)
        .saturating_add(body.get("tools").map_or(0, estimate_json_tokens));
    Ok(ChatRequest {
        alias,
        stream,
        include_usage,
        body,
        prompt_estimate,
    })
}

/// About four characters per token.
pub(crate) fn estimate_tokens(text: &str) -> u32 {
    tokens_of_chars(text.chars().count())
}

fn tokens_of_chars(chars: usize) -> u32 {
    u32::try_from(chars.div_ceil(4)).unwrap_or(u32::MAX)
}

/// [`estimate_tokens`] of `value` written as compact JSON, counted as it is
/// written rather than built as a string first.
fn estimate_json_tokens(value: &impl serde::Serialize) -> u32 {
    /// Counts the characters of the UTF-8 written to it: every byte that
    /// does not continue a character.
    struct CharCount(usize);
    impl std::io::Write for CharCount {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.iter().filter(|b| (**b & 0xC0) != 0x80).count();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = CharCount(0);
    // Writing to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    tokens_of_chars(count.0)
}

/// The body for an OpenAI-style upstream, as JSON bytes: the client's body
/// with the upstream model name, `stream_options.include_usage` so that
/// streamed usage can be accounted, and the completion bound the budget
/// reserved (`gateway::budget::completion_bound`: the smaller client value,
/// else the default) always set, in the field the upstream honours:
/// `max_completion_tokens` alone for OpenAI itself (`max_tokens` is
/// deprecated there and refused by its reasoning models), `max_tokens` for
/// every other OpenAI-compatible server (Ollama, vLLM, llama.cpp and LiteLLM
/// all honour it; a client's `max_completion_tokens` is kept too).
///
/// The client's members are written from the request as they are (not
/// copied first): a retry or a fallback builds its body again.
pub(crate) fn upstream_body(
    request: &ChatRequest,
    upstream_model: &str,
    provider: super::provider::Provider,
) -> Vec<u8> {
    let body = &request.body;
    let bound = Value::from(crate::gateway::budget::completion_bound_in(body));
    let mut set: Vec<(&'static str, Value)> = vec![("model", upstream_model.into())];
    let mut drop: &[&str] = &[];
    if provider == super::provider::Provider::OpenAi {
        drop = &["max_tokens"];
        set.push(("max_completion_tokens", bound));
    } else {
        if body.contains_key("max_completion_tokens") {
            set.push(("max_completion_tokens", bound.clone()));
        }
        set.push(("max_tokens", bound));
    }
    if request.stream {
        let mut options = match body.get("stream_options") {
            Some(Value::Object(o)) => o.clone(),
            _ => Map::new(),
        };
        options.insert("include_usage".into(), Value::Bool(true));
        set.push(("stream_options", Value::Object(options)));
    }
    let patched = Patched {
        body,
        set: &set,
        drop,
    };
    serde_json::to_vec(&patched).unwrap_or_default()
}

/// A JSON object written as `body` without the members in `drop` and with
/// those in `set` replaced (or added).
struct Patched<'a> {
    body: &'a Map<String, Value>,
    set: &'a [(&'static str, Value)],
    drop: &'a [&'a str],
}

impl serde::Serialize for Patched<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(None)?;
        for (key, value) in self.body {
            let key = key.as_str();
            if !self.drop.contains(&key) && !self.set.iter().any(|(k, _)| *k == key) {
                map.serialize_entry(key, value)?;
            }
        }
        for (key, value) in self.set {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

fn as_u32(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

/// `usage.{prompt_tokens, completion_tokens}` when present.
pub(crate) fn usage_of(v: &Value) -> Option<Usage> {
    let usage = v.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        prompt_tokens: as_u32(usage.get("prompt_tokens")).unwrap_or(0),
        completion_tokens: as_u32(usage.get("completion_tokens")).unwrap_or(0),
    })
}

/// Characters of generated content (text and tool-call arguments) in a
/// message or a delta.
pub(crate) fn content_chars(message: &Value) -> usize {
    let mut n = message
        .get("content")
        .and_then(Value::as_str)
        .map_or(0, |s| s.chars().count());
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for call in calls {
            n += call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .map_or(0, |s| s.chars().count());
            n += call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .map_or(0, |s| s.chars().count());
        }
    }
    n
}

/// An OpenAI assistant message: its text (null when it only calls tools)
/// and its tool calls.
pub(crate) fn assistant_message(text: String, calls: Vec<Value>) -> Value {
    let mut message = serde_json::Map::new();
    message.insert("role".into(), "assistant".into());
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    message.insert("content".into(), content);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(message)
}

pub(crate) fn usage_json(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens(),
    })
}

/// Validates an OpenAI-style `chat.completion`, sets its `model` to the
/// alias and returns its usage (estimated when the upstream sent none, and
/// then written into the response too).
pub(crate) fn finish_response(
    response: Value,
    alias: &str,
    prompt_estimate: u32,
) -> Result<(Value, Usage), super::Malformed> {
    let Value::Object(mut obj) = response else {
        return Err(super::Malformed::from("the response is not a JSON object"));
    };
    if let Some(err) = obj.get("error").filter(|e| !e.is_null()) {
        return Err(super::Malformed::from(format!(
            "error in a 200 response: {}",
            error_message(err)
        )));
    }
    let Some(Value::Array(choices)) = obj.get("choices") else {
        return Err(super::Malformed::from("the response has no `choices`"));
    };
    let completion_estimate: usize = choices
        .iter()
        .filter_map(|c| c.get("message"))
        .map(content_chars)
        .sum();
    obj.insert("model".into(), Value::String(alias.to_owned()));
    let value = Value::Object(obj);
    let usage = match usage_of(&value) {
        Some(u) => u,
        None => {
            let u = Usage {
                prompt_tokens: prompt_estimate,
                completion_tokens: u32::try_from(completion_estimate.div_ceil(4))
                    .unwrap_or(u32::MAX),
            };
            let mut value = value;
            if let Value::Object(o) = &mut value {
                o.insert("usage".into(), usage_json(u));
            }
            return Ok((value, u));
        }
    };
    Ok((value, usage))
}

/// The message of an error object: `{"message": …}`, a string, or the JSON.
pub(crate) fn error_message(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => match o.get("message") {
            Some(Value::String(m)) => m.clone(),
            _ => err.to_string(),
        },
        other => other.to_string(),
    }
}

/// The message in an upstream error body, OpenAI (`{"error": {"message"}}`)
/// or Anthropic (`{"type": "error", "error": {"message"}}`) shaped, else the
/// text itself; at most 1000 characters.
pub(crate) fn upstream_error_message(body: &str) -> String {
    let message = match serde_json::from_str::<Value>(body) {
        Ok(v) => match v.get("error") {
            Some(err) => error_message(err),
            None => match v.get("message").and_then(Value::as_str) {
                Some(m) => m.to_owned(),
                None => body.trim().to_owned(),
            },
        },
        Err(_) => body.trim().to_owned(),
    };
    let mut message: String = message.chars().take(1000).collect();
    if message.is_empty() {
        message.push_str("(no message)");
    }
    message
}

/// State of an OpenAI-style upstream stream, per chunk.
#[derive(Debug)]
pub(crate) struct OpenAiStream {
    alias: String,
    /// Forward usage-only chunks (the client asked for them).
    forward_usage: bool,
    usage: Option<Usage>,
    completion_chars: usize,
    saw_finish: bool,
    done: bool,
}

/// What one upstream event means.
pub(crate) enum StreamStep {
    Chunks(Vec<Value>),
    /// An error object inside the stream.
    Error {
        status: u16,
        message: String,
    },
}

impl OpenAiStream {
    pub fn new(alias: &str, forward_usage: bool) -> Self {
        OpenAiStream {
            alias: alias.to_owned(),
            forward_usage,
            usage: None,
            completion_chars: 0,
            saw_finish: false,
            done: false,
        }
    }

    pub fn done(&self) -> bool {
        self.done
    }

    /// A stream that ended without `[DONE]` is accepted when a choice had
    /// finished (some servers omit the marker); otherwise it was cut.
    pub fn complete(&self) -> bool {
        self.done || self.saw_finish
    }

    pub fn usage(&self, prompt_estimate: u32) -> Usage {
        self.usage.unwrap_or(Usage {
            prompt_tokens: prompt_estimate,
            completion_tokens: u32::try_from(self.completion_chars.div_ceil(4)).unwrap_or(u32::MAX),
        })
    }

    pub fn on_data(&mut self, data: &str) -> Result<StreamStep, super::Malformed> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(StreamStep::Chunks(Vec::new()));
        }
        if data.is_empty() {
            return Ok(StreamStep::Chunks(Vec::new()));
        }
        let mut chunk: Value =
            serde_json::from_str(data).map_err(|_| "a stream chunk is not JSON".to_owned())?;
        let Some(obj) = chunk.as_object_mut() else {
            return Err(super::Malformed::from(
                "a stream chunk is not a JSON object",
            ));
        };
        if let Some(err) = obj.get("error").filter(|e| !e.is_null()) {
            let status = err
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| (400..600).contains(c))
                .unwrap_or(500);
            return Ok(StreamStep::Error {
                status,
                message: error_message(err),
            });
        }
        obj.insert("model".into(), Value::String(self.alias.clone()));
        let mut has_choices = false;
        if let Some(Value::Array(choices)) = obj.get("choices") {
            for choice in choices {
                has_choices = true;
                if let Some(delta) = choice.get("delta") {
                    self.completion_chars += content_chars(delta);
                }
                if choice.get("finish_reason").is_some_and(|f| !f.is_null()) {
                    self.saw_finish = true;
                }
            }
        }
        if let Some(u) = usage_of(&chunk) {
            self.usage = Some(u);
            if !has_choices && !self.forward_usage {
                return Ok(StreamStep::Chunks(Vec::new()));
            }
            if !self.forward_usage
                && let Some(o) = chunk.as_object_mut()
            {
                o.remove("usage");
            }
        }
        Ok(StreamStep::Chunks(vec![chunk]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_validates_routing_fields() {
        let ok = parse_chat_request(json!({
            "model": "default",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        }))
        .unwrap();
        assert_eq!(ok.alias, "default");
        assert!(ok.stream && ok.include_usage);
        assert!(ok.prompt_estimate > 0);
        for bad_request in [
            json!([]),
            json!({"messages": [{"role": "user", "content": "x"}]}),
            json!({"model": "m", "messages": []}),
            json!({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}),
            json!({"model": "m", "messages": [{"content": "x"}]}),
            json!({"model": "m", "messages": [{"role": "user"}], "stream": "yes"}),
            json!({"model": "m", "messages": [{"role": "user"}], "tools": [{"type": "function"}]}),
            json!({"model": "m", "messages": [{"role": "user"}], "tools": {}}),
        ] {
            let err = parse_chat_request(bad_request.clone()).unwrap_err();
            assert!(matches!(err, LlmError::BadRequest(_)), "{bad_request}");
        }
    }

    #[test]
    fn upstream_body_requests_usage_when_streaming() {
        let req = parse_chat_request(json!({
            "model": "alias", "messages": [{"role": "user", "content": "x"}], "stream": true
        }))
        .unwrap();
        let body: Value = serde_json::from_slice(&upstream_body(
            &req,
            "gpt-4o",
            super::super::provider::Provider::OpenAiCompatible,
        ))
        .unwrap();
        assert_eq!(body["model"], "gpt-4o");
        assert_eq!(body["stream_options"]["include_usage"], true);
    }

    #[test]
    fn upstream_body_replaces_members_once_and_keeps_the_rest() {
        use super::super::provider::Provider;
        let req = parse_chat_request(json!({
            "model": "alias", "messages": [{"role": "user", "content": "x"}], "stream": true,
            "stream_options": {"include_usage": false, "other": 1},
            "max_tokens": 50, "max_completion_tokens": 70, "temperature": 0.5,
        }))
        .unwrap();
        let text = String::from_utf8(upstream_body(&req, "up", Provider::OpenAi)).unwrap();
        assert_eq!(text.matches("\"model\"").count(), 1, "{text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "up", "messages": [{"role": "user", "content": "x"}], "stream": true,
                "stream_options": {"include_usage": true, "other": 1},
                "max_completion_tokens": 50, "temperature": 0.5,
            })
        );
        let body: Value =
            serde_json::from_slice(&upstream_body(&req, "up", Provider::Ollama)).unwrap();
        assert_eq!(body["max_tokens"], 50);
        assert_eq!(body["max_completion_tokens"], 50);
    }

    #[test]
    fn json_token_estimate_counts_characters_as_written() {
        for value in [
            json!([{"role": "user", "content": "héllo 世界 \n \"q\""}]),
            json!([]),
            json!({"a": [1, 2.5, null, true]}),
        ] {
            assert_eq!(
                estimate_json_tokens(&value),
                estimate_tokens(&value.to_string()),
                "{value}"
            );
        }
    }

    #[test]
    fn error_messages_from_both_dialects() {
        assert_eq!(
            upstream_error_message(r#"{"error": {"message": "bad", "type": "x"}}"#),
            "bad"
        );
        assert_eq!(
            upstream_error_message(
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"nope"}}"#
            ),
            "nope"
        );
        assert_eq!(upstream_error_message("  plain text "), "plain text");
        assert_eq!(upstream_error_message(""), "(no message)");
    }

    #[test]
    fn missing_usage_is_estimated() {
        let (resp, usage) = finish_response(
            json!({"choices": [{"message": {"role": "assistant", "content": "abcdefgh"}}]}),
            "alias",
            7,
        )
        .unwrap();
        assert_eq!(resp["model"], "alias");
        assert_eq!(
            usage,
            Usage {
                prompt_tokens: 7,
                completion_tokens: 2
            }
        );
        assert_eq!(resp["usage"]["total_tokens"], 9);
    }
}
