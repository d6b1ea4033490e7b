//! The parts of an OpenAI chat request a local model uses: messages as
//! plain text, sampling and limits.

use serde_json::{Map, Value, json};

use super::error::LocalError;

/// What the client asked for.
#[derive(Debug, Clone)]
pub struct LocalRequest {
    /// `{role, content}` with string content, ready for the template.
    pub messages: Vec<Value>,
    pub tools: Option<Value>,
    pub max_tokens: Option<usize>,
    pub temperature: f32,
    pub top_p: f32,
    pub stop: Vec<String>,
    pub seed: Option<u64>,
}

fn bad(message: impl Into<String>) -> LocalError {
    LocalError::BadRequest(message.into())
}

fn number(
    body: &Map<String, Value>,
    key: &str,
    default: f64,
    range: (f64, f64),
) -> Result<f64, LocalError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_f64()
            .filter(|n| (range.0..=range.1).contains(n))
            .ok_or_else(|| {
                bad(format!(
                    "`{key}` must be a number in {}..={}",
                    range.0, range.1
                ))
            }),
    }
}

/// Text of a message's `content`: a string, or the text parts of an array.
fn content_text(i: usize, content: Option<&Value>) -> Result<String, LocalError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default())
                    }
                    other => {
                        return Err(bad(format!(
                            "messages[{i}]: content part type {} is not supported by local models (text only)",
                            other.unwrap_or("(none)")
                        )));
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(bad(format!(
            "messages[{i}]: `content` must be a string or an array"
        ))),
    }
}

impl LocalRequest {
    pub fn parse(body: &Map<String, Value>) -> Result<Self, LocalError> {
        let mut messages = Vec::new();
        for (i, m) in body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
            // Templates written for Hugging Face know `system`, not `developer`.
            let role = if role == "developer" { "system" } else { role };
            let mut message = json!({"role": role, "content": content_text(i, m.get("content"))?});
            for key in ["name", "tool_calls", "tool_call_id"] {
                if let (Some(v), Some(o)) = (m.get(key), message.as_object_mut()) {
                    o.insert(key.into(), v.clone());
                }
            }
            messages.push(message);
        }
        if let Some(n) = body.get("n").filter(|n| !n.is_null())
            && n.as_u64() != Some(1)
        {
            return Err(bad("local models generate one choice (`n` must be 1)"));
        }
        let max_tokens = match body
            .get("max_completion_tokens")
            .filter(|v| !v.is_null())
            .or_else(|| body.get("max_tokens").filter(|v| !v.is_null()))
        {
            None => None,
            Some(v) => Some(
                v.as_u64()
                    .filter(|n| *n > 0)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| bad("`max_tokens` must be a positive integer"))?,
            ),
        };
        let stop = match body.get("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if a.len() <= 4 => a
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("`stop` must be a string or up to 4 strings"))?,
            Some(_) => return Err(bad("`stop` must be a string or up to 4 strings")),
        }
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
        let seed = match body.get("seed") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .map(|s| s as u64)
                    .ok_or_else(|| bad("`seed` must be an integer"))?,
            ),
        };
        Ok(LocalRequest {
            messages,
            tools: body.get("tools").filter(|t| !t.is_null()).cloned(),
            max_tokens,
            // Unset means greedy, unlike OpenAI's 1.0: small local models
            // answer far more reliably greedily; callers that want sampling
            // say so.
            temperature: number(body, "temperature", 0.0, (0.0, 2.0))? as f32,
            top_p: number(body, "top_p", 1.0, (0.0, 1.0))? as f32,
            stop,
            seed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<LocalRequest, LocalError> {
        LocalRequest::parse(v.as_object().unwrap())
    }

    #[test]
    fn reads_sampling_and_limits() {
        let r = parse(json!({
            "messages": [{"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
                         {"role": "user", "content": "hi"}],
            "max_tokens": 5, "temperature": 0, "stop": ["\n"], "seed": 7
        }))
        .unwrap();
        assert_eq!(
            r.messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            (r.max_tokens, r.temperature, r.seed),
            (Some(5), 0.0, Some(7))
        );
        assert_eq!(r.stop, vec!["\n"]);
    }

    #[test]
    fn rejects_what_it_cannot_do() {
        for body in [
            json!({"messages": [], "n": 2}),
            json!({"messages": [], "max_tokens": 0}),
            json!({"messages": [], "temperature": 3}),
            json!({"messages": [], "stop": 5}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
        ] {
            assert!(
                matches!(parse(body.clone()), Err(LocalError::BadRequest(_))),
                "{body}"
            );
        }
    }
}
