//! Integration tests of the router against a scripted fake upstream (an axum
//! server on 127.0.0.1:0). Each deployment of a test points at
//! `http://127.0.0.1:PORT/<name>/…`; the fake answers requests under
//! `/<name>/` from that name's script (the last reply repeats).

mod anthropic;
mod failover;
mod leaks;
mod openai;
mod strategy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use futures_util::StreamExt;
use serde_json::{Value, json};

use super::{ChatOutcome, LlmError, LlmRouter, Usage};
use crate::config::{Gateway, LitellmParams, ModelDeployment, RoutingStrategy};

pub(super) const KEY: &str = "sk-test-7f3a9c2e5b1d4f6a8c0e2b4d6f8a1c3e";

/// One scripted answer.
#[derive(Clone, Debug)]
pub(super) enum Reply {
    /// 200 with this JSON.
    Json(Value),
    /// This status and body, with `Retry-After` if given.
    Status {
        status: u16,
        body: String,
        retry_after: Option<u64>,
    },
    /// 200 `text/event-stream` with these raw frames.
    Sse(Vec<String>),
    /// These frames, then the connection is dropped.
    SseThenDrop(Vec<String>),
    /// These frames, then nothing more (the stream hangs).
    SseThenHang(Vec<String>),
    /// Waits, then replies.
    Delay(Duration, Box<Reply>),
    /// Waits only if the request body contains the marker, then replies.
    DelayIf(&'static str, Duration, Box<Reply>),
}

#[derive(Debug, Clone)]
pub(super) struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct FakeState {
    scripts: HashMap<String, Vec<Reply>>,
    requests: HashMap<String, Vec<Recorded>>,
}

#[derive(Clone, Default)]
pub(super) struct Fake {
    state: Arc<Mutex<FakeState>>,
    pub base: String,
}

impl Fake {
    pub async fn start() -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fake = Fake {
            base: format!("http://{addr}"),
            ..Fake::default()
        };
        let handler_state = fake.clone();
        let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
            let fake = handler_state.clone();
            async move { fake.handle(uri, headers, body).await }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        fake
    }

    pub fn script(&self, name: &str, replies: Vec<Reply>) {
        self.state
            .lock()
            .unwrap()
            .scripts
            .insert(name.to_owned(), replies);
    }

    pub fn requests(&self, name: &str) -> Vec<Recorded> {
        self.state
            .lock()
            .unwrap()
            .requests
            .get(name)
            .cloned()
            .unwrap_or_default()
    }

    pub fn count(&self, name: &str) -> usize {
        self.requests(name).len()
    }

    async fn handle(&self, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        let path = uri.path().to_owned();
        let name = path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let reply = {
            let mut state = self.state.lock().unwrap();
            let seen = state.requests.get(&name).map_or(0, Vec::len);
            let reply = state
                .scripts
                .get(&name)
                .and_then(|s| s.get(seen.min(s.len().saturating_sub(1))).cloned());
            state
                .requests
                .entry(name.clone())
                .or_default()
                .push(Recorded {
                    path,
                    headers,
                    body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                });
            reply
        };
        let reply = match reply {
            Some(Reply::DelayIf(marker, wait, then)) => {
                Some(if String::from_utf8_lossy(&body).contains(marker) {
                    Reply::Delay(wait, then)
                } else {
                    *then
                })
            }
            other => other,
        };
        match reply {
            Some(reply) => respond(reply).await,
            None => Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Body::from(format!("no script for `{name}`")))
                .unwrap(),
        }
    }
}

async fn respond(mut reply: Reply) -> Response {
    while let Reply::Delay(wait, inner) = reply {
        tokio::time::sleep(wait).await;
        reply = *inner;
    }
    let sse = |body: Body| {
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(body)
            .unwrap()
    };
    let frames = |frames: Vec<String>| {
        futures_util::stream::iter(
            frames
                .into_iter()
                .map(|f| Ok::<_, std::io::Error>(Bytes::from(f))),
        )
    };
    match reply {
        Reply::Json(v) => Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(v.to_string()))
            .unwrap(),
        Reply::Status {
            status,
            body,
            retry_after,
        } => {
            let mut r = Response::builder().status(status);
            if let Some(secs) = retry_after {
                r = r.header("retry-after", secs.to_string());
            }
            r.body(Body::from(body)).unwrap()
        }
        Reply::Sse(f) => sse(Body::from_stream(frames(f))),
        Reply::SseThenDrop(f) => sse(Body::from_stream(frames(f).chain(
            futures_util::stream::once(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(std::io::Error::other("dropped by the fake upstream"))
            }),
        ))),
        Reply::SseThenHang(f) => sse(Body::from_stream(
            frames(f).chain(futures_util::stream::pending()),
        )),
        Reply::Delay(..) | Reply::DelayIf(..) => unreachable!(),
    }
}

/// An OpenAI-style deployment `alias` → `/<name>/v1` of the fake.
pub(super) fn openai_dep(fake: &Fake, alias: &str, name: &str) -> ModelDeployment {
    dep(
        alias,
        "openai/gpt-4o-mini",
        format!("{}/{name}/v1", fake.base),
    )
}

/// An Anthropic deployment `alias` → `/<name>` of the fake.
pub(super) fn anthropic_dep(fake: &Fake, alias: &str, name: &str) -> ModelDeployment {
    dep(
        alias,
        "anthropic/claude-test",
        format!("{}/{name}", fake.base),
    )
}

pub(super) fn dep(alias: &str, model: &str, api_base: String) -> ModelDeployment {
    ModelDeployment {
        model_name: alias.to_owned(),
        model_info: Default::default(),
        litellm_params: LitellmParams {
            model: model.to_owned(),
            api_base: Some(api_base),
            api_key: Some(KEY.to_owned()),
            rpm: None,
            tpm: None,
            timeout: None,
        },
    }
}

pub(super) fn gateway(
    model_list: Vec<ModelDeployment>,
    fallbacks: &[(&str, &[&str])],
    strategy: RoutingStrategy,
    num_retries: u32,
) -> Gateway {
    Gateway {
        model_list,
        fallbacks: fallbacks
            .iter()
            .map(|(from, to)| {
                [(from.to_string(), to.iter().map(|s| s.to_string()).collect())]
                    .into_iter()
                    .collect()
            })
            .collect(),
        routing_strategy: strategy,
        num_retries,
        timeout: 0.5,
        ..Gateway::default()
    }
}

pub(super) fn router(config: &Gateway) -> LlmRouter {
    let client = super::UpstreamClient::new().unwrap();
    LlmRouter::new(config, client)
        .unwrap()
        .with_backoff(Duration::from_millis(1), Duration::from_millis(5))
}

pub(super) fn chat_request(alias: &str) -> Value {
    json!({"model": alias, "messages": [{"role": "user", "content": "Hello"}]})
}

pub(super) fn stream_request(alias: &str) -> Value {
    json!({"model": alias, "stream": true, "messages": [{"role": "user", "content": "Hello"}]})
}

pub(super) fn completion(text: &str) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    })
}

pub(super) fn ok(text: &str) -> Reply {
    Reply::Json(completion(text))
}

pub(super) fn status(code: u16, body: &str) -> Reply {
    Reply::Status {
        status: code,
        body: body.to_owned(),
        retry_after: None,
    }
}

pub(super) fn hang() -> Reply {
    Reply::Delay(Duration::from_secs(5), Box::new(ok("too late")))
}

pub(super) fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

/// OpenAI stream frames: a role chunk, one chunk per piece, a finish chunk,
/// a usage chunk and `[DONE]`.
pub(super) fn openai_frames(pieces: &[&str]) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        data(
            json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut frames = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in pieces {
        frames.push(chunk(json!({ "content": piece }), Value::Null));
    }
    frames.push(chunk(json!({}), json!("stop")));
    frames.push(data(
        json!({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1,
        "model": "gpt-4o-mini", "choices": [],
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}}),
    ));
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

pub(super) fn complete(outcome: ChatOutcome) -> (Value, Usage, String) {
    match outcome {
        ChatOutcome::Complete {
            response,
            usage,
            deployment,
        } => (response, usage, deployment.to_string()),
        other => panic!("expected a complete answer, got {other:?}"),
    }
}

/// Collects a stream: its items, the deployment and the usage.
pub(super) async fn collect(
    outcome: ChatOutcome,
) -> (Vec<Result<Value, LlmError>>, String, Option<Usage>) {
    match outcome {
        ChatOutcome::Stream {
            events,
            deployment,
            usage,
        } => {
            let items: Vec<_> = events.collect().await;
            (items, deployment.to_string(), usage.await.ok())
        }
        other => panic!("expected a stream, got {other:?}"),
    }
}

/// The text content of a list of OK chunks.
pub(super) fn streamed_text(items: &[Result<Value, LlmError>]) -> String {
    items
        .iter()
        .filter_map(|i| i.as_ref().ok())
        .filter_map(|c| {
            c.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect()
}
