//! A local stand-in for a model provider that speaks the OpenAI Chat
//! Completions protocol (JSON and SSE), scripted per test. Loopback only.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures_util::StreamExt;
use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub enum Behaviour {
    /// Answers with this text (streamed in two chunks when asked to stream).
    Answer(String),
    /// Answers with one tool call.
    ToolCall { name: String, arguments: String },
    /// Answers with this HTTP status and an OpenAI-style error.
    Status(u16),
    /// Never answers.
    Hang,
    /// Streams one chunk, then drops the connection.
    DropMidStream,
    /// Puts the Authorization header it received into the answer.
    EchoAuthorization,
    /// Answers "the tool said: <the last tool result of the request>".
    EchoLastTool,
    /// Answers "you said: <the last user message of the request>".
    EchoUser,
    /// The n-th request gets the n-th behaviour; the last one repeats.
    Script(Vec<Behaviour>),
    /// Answers with several tool calls at once.
    ToolCalls(Vec<(String, String)>),
    /// Waits, then behaves as the inner behaviour.
    Slow(Duration, Box<Behaviour>),
}

impl Behaviour {
    pub fn answer(text: &str) -> Self {
        Behaviour::Answer(text.to_string())
    }

    /// Answers `text` after `ms` milliseconds.
    pub fn slow_answer(ms: u64, text: &str) -> Self {
        Behaviour::Slow(Duration::from_millis(ms), Box::new(Self::answer(text)))
    }

    pub fn tool(name: &str, arguments: &str) -> Self {
        Behaviour::ToolCall {
            name: name.to_string(),
            arguments: arguments.to_string(),
        }
    }
}

/// The content of the request's last message by `role`.
fn last_said(request: &Value, role: &str) -> String {
    request["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == role))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

#[derive(Clone)]
struct Shared {
    behaviour: Behaviour,
    requests: Arc<Mutex<Vec<Value>>>,
}

pub struct FakeUpstream {
    pub base_url: String,
    pub requests: Arc<Mutex<Vec<Value>>>,
}

impl FakeUpstream {
    pub async fn spawn(behaviour: Behaviour) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            behaviour,
            requests: requests.clone(),
        };
        let router = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(shared);
        let addr = super::serve(router).await;
        Self {
            base_url: format!("http://127.0.0.1:{}/v1", addr.port()),
            requests,
        }
    }

    pub fn received(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

async fn complete(State(shared): State<Shared>, headers: HeaderMap, body: String) -> Response {
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let n = {
        let mut requests = shared.requests.lock().unwrap();
        requests.push(request.clone());
        requests.len()
    };
    let model = request["model"].as_str().unwrap_or("fake").to_string();
    let stream = request["stream"].as_bool().unwrap_or(false);
    let mut behaviour = match shared.behaviour {
        Behaviour::Script(steps) => steps
            .get(n - 1)
            .or(steps.last())
            .cloned()
            .unwrap_or(Behaviour::Status(500)),
        other => other,
    };
    while let Behaviour::Slow(delay, inner) = behaviour {
        tokio::time::sleep(delay).await;
        behaviour = *inner;
    }
    match behaviour {
        Behaviour::Script(_) | Behaviour::Slow(..) => {
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        Behaviour::ToolCalls(calls) => answer(
            &model,
            stream,
            json!({"role": "assistant", "content": null, "tool_calls": calls.iter().enumerate().map(|(i, (name, arguments))| json!(
                {"id": format!("call_{n}_{i}"), "type": "function", "function": {"name": name, "arguments": arguments}}
            )).collect::<Vec<_>>()}),
            "tool_calls",
        ),
        Behaviour::Answer(text) => answer(
            &model,
            stream,
            json!({"role": "assistant", "content": text}),
            "stop",
        ),
        Behaviour::ToolCall { name, arguments } => answer(
            &model,
            stream,
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("call_{n}"), "type": "function", "function": {"name": name, "arguments": arguments}}
            ]}),
            "tool_calls",
        ),
        Behaviour::EchoLastTool => {
            let said = last_said(&request, "tool");
            answer(
                &model,
                stream,
                json!({"role": "assistant", "content": format!("the tool said: {said}")}),
                "stop",
            )
        }
        Behaviour::EchoUser => {
            let said = last_said(&request, "user");
            answer(
                &model,
                stream,
                json!({"role": "assistant", "content": format!("you said: {said}")}),
                "stop",
            )
        }
        Behaviour::EchoAuthorization => {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            answer(
                &model,
                stream,
                json!({"role": "assistant", "content": format!("you sent {auth}")}),
                "stop",
            )
        }
        Behaviour::Status(code) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (
                status,
                axum::Json(
                    json!({"error": {"message": format!("upstream says {code}"), "type": "fake"}}),
                ),
            )
                .into_response()
        }
        Behaviour::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Behaviour::DropMidStream => {
            let first = sse(&chunk(
                &model,
                json!({"role": "assistant", "content": "partial"}),
                None,
            ));
            // The error comes after a pause, so the first chunk is on the wire.
            let stream = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(first)]).chain(
                futures_util::stream::once(async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Err(std::io::Error::other("connection dropped"))
                }),
            );
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(stream))
                .unwrap_or_default()
        }
    }
}

fn answer(model: &str, stream: bool, message: Value, finish: &str) -> Response {
    let usage = json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18});
    if !stream {
        return axum::Json(json!({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": 1_700_000_000u64, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }))
        .into_response();
    }
    let mut events = Vec::new();
    match message["content"].as_str() {
        Some(text) => {
            let (a, b) = halves(text);
            events.push(chunk(
                model,
                json!({"role": "assistant", "content": a}),
                None,
            ));
            events.push(chunk(model, json!({"content": b}), None));
        }
        None => {
            // Each call streams as its id and name, then its arguments in
            // two fragments, as OpenAI does.
            for (i, call) in message["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let arguments = call["function"]["arguments"].as_str().unwrap_or("");
                let (a, b) = halves(arguments);
                events.push(chunk(
                    model,
                    json!({"role": "assistant", "tool_calls": [{
                        "index": i, "id": call["id"], "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": a}
                    }]}),
                    None,
                ));
                events.push(chunk(
                    model,
                    json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}),
                    None,
                ));
            }
        }
    }
    events.push(chunk(model, json!({}), Some(finish)));
    let mut usage_chunk = chunk(model, json!({}), None);
    usage_chunk["choices"] = json!([]);
    usage_chunk["usage"] = usage;
    events.push(usage_chunk);
    let mut body: String = events.iter().map(sse).collect();
    body.push_str("data: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn chunk(model: &str, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1_700_000_000u64, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

fn sse(event: &Value) -> String {
    format!("data: {event}\n\n")
}

/// Splits at the char boundary nearest the middle.
fn halves(text: &str) -> (&str, &str) {
    let mut mid = text.len() / 2;
    while !text.is_char_boundary(mid) {
        mid += 1;
    }
    text.split_at(mid)
}
