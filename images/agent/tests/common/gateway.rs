//! A fake pincer gateway for tests: a real HTTP/1.1 server on a unix socket
//! in a temporary directory. `POST /v1/chat/completions` answers with the
//! next scripted reply (OpenAI's streaming SSE, byte for byte, in chunked
//! transfer encoding), `POST /mcp` with a stateless MCP JSON-RPC handler.
//! Every request is recorded; a wrong bearer token gets a 401.
//!
//! Shared by the runner's unit tests (`src/turn/tests.rs`) and its
//! integration tests, so it depends on nothing but std and serde_json.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// The token the fake gateway accepts.
pub const TOKEN: &str = "pincer-test-token-5f3a9c";
pub const MODEL: &str = "test-model";

/// One scripted answer to a chat-completions request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// SSE body pieces, each sent (and flushed) as one HTTP chunk, `pause`
    /// apart.
    Sse {
        pieces: Vec<String>,
        pause: Duration,
    },
    /// A complete answer with this status and JSON body.
    Json(u16, Value),
    /// Accept the request, never answer (the connection stays open until
    /// the gateway is dropped).
    Hang,
}

/// A recorded request.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

pub type McpHandler = Box<dyn Fn(&Value) -> Value + Send + Sync>;

struct State {
    chat: Mutex<VecDeque<Reply>>,
    mcp: Option<McpHandler>,
    requests: Mutex<Vec<Recorded>>,
    hung: Mutex<Vec<UnixStream>>,
}

pub struct FakeGateway {
    dir: PathBuf,
    pub socket: PathBuf,
    state: Arc<State>,
}

impl FakeGateway {
    /// Serves `chat` (in order) and, when given, `mcp` requests.
    pub fn start(chat: Vec<Reply>, mcp: Option<McpHandler>) -> FakeGateway {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pincer-fake-gateway-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("gateway dir");
        let socket = dir.join("gateway.sock");
        let listener = UnixListener::bind(&socket).expect("bind fake gateway");
        let state = Arc::new(State {
            chat: Mutex::new(chat.into()),
            mcp,
            requests: Mutex::new(Vec::new()),
            hung: Mutex::new(Vec::new()),
        });
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let state = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &state));
            }
        });
        FakeGateway { dir, socket, state }
    }

    /// The value of `PINCER_GATEWAY_URL` for this gateway.
    pub fn url(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state
            .requests
            .lock()
            .expect("fake gateway state")
            .clone()
    }

    pub fn chat_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .collect()
    }
}

impl Drop for FakeGateway {
    fn drop(&mut self) {
        for stream in self
            .state
            .hung
            .lock()
            .expect("fake gateway state")
            .drain(..)
        {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn serve(stream: UnixStream, state: &State) {
    let Some(request) = read_request(&stream) else {
        return;
    };
    state
        .requests
        .lock()
        .expect("fake gateway state")
        .push(request.clone());
    let mut out = stream;
    if request.header("authorization") != Some(&format!("Bearer {TOKEN}")) {
        let body = json!({"error": {"message": "invalid pincer key", "type": "authentication_error", "code": "invalid_api_key"}});
        write_json(&mut out, 401, &body);
        return;
    }
    match request.path.as_str() {
        "/v1/chat/completions" => {
            let reply = state.chat.lock().expect("fake gateway state").pop_front();
            match reply {
                Some(Reply::Sse { pieces, pause }) => write_sse(&mut out, &pieces, pause),
                Some(Reply::Json(status, body)) => write_json(&mut out, status, &body),
                Some(Reply::Hang) => state.hung.lock().expect("fake gateway state").push(out),
                None => write_json(
                    &mut out,
                    500,
                    &json!({"error": {"message": "fake gateway: no scripted reply left", "type": "server_error", "code": null}}),
                ),
            }
        }
        "/mcp" => match &state.mcp {
            Some(handler) => {
                let answer = handler(&request.body);
                if answer.is_null() {
                    // A notification: accepted, no body.
                    let _ = out.write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n");
                } else {
                    write_json(&mut out, 200, &answer);
                }
            }
            None => write_json(&mut out, 404, &json!({"error": {"message": "no MCP here"}})),
        },
        _ => write_json(&mut out, 404, &json!({"error": {"message": "not found"}})),
    }
}

fn read_request(stream: &UnixStream) -> Option<Recorded> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(Recorded {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        404 => "Not Found",
        429 => "Too Many Requests",
        _ => "Error",
    }
}

fn write_json(out: &mut UnixStream, status: u16, body: &Value) {
    let body = body.to_string();
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        reason(status),
        body.len()
    );
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body.as_bytes());
}

fn write_sse(out: &mut UnixStream, pieces: &[String], pause: Duration) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 && !pause.is_zero() {
            std::thread::sleep(pause);
        }
        let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
        if out
            .write_all(chunk.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            return;
        }
    }
    let _ = out.write_all(b"0\r\n\r\n");
}

/// One `data:` event of an OpenAI chat-completion chunk stream.
pub fn chunk(choices: Value, usage: Option<Value>) -> String {
    let mut chunk = json!({
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_test",
        "choices": choices,
    });
    if let Some(usage) = usage {
        chunk["usage"] = usage;
    }
    format!("data: {chunk}\n\n")
}

fn delta(delta: Value, finish: Option<&str>) -> String {
    chunk(
        json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
        None,
    )
}

fn usage_and_done(usage: (u64, u64)) -> Vec<String> {
    vec![
        chunk(
            json!([]),
            Some(
                json!({"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}),
            ),
        ),
        "data: [DONE]\n\n".to_string(),
    ]
}

/// A streamed text answer: one content delta per part.
pub fn text(parts: &[&str], usage: (u64, u64)) -> Reply {
    let mut pieces = vec![delta(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )];
    for part in parts {
        pieces.push(delta(json!({"content": part}), None));
    }
    pieces.push(delta(json!({}), Some("stop")));
    pieces.extend(usage_and_done(usage));
    Reply::Sse {
        pieces,
        pause: Duration::ZERO,
    }
}

/// A streamed answer calling tools `(id, name, arguments)`, the arguments
/// split into small fragments as OpenAI streams them.
pub fn tool_calls(calls: &[(&str, &str, &str)], usage: (u64, u64)) -> Reply {
    let mut pieces = vec![delta(
        json!({"role": "assistant", "content": null, "refusal": null}),
        None,
    )];
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        pieces.push(delta(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        let chars: Vec<char> = arguments.chars().collect();
        for fragment in chars.chunks(5) {
            let fragment: String = fragment.iter().collect();
            pieces.push(delta(
                json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}),
                None,
            ));
        }
    }
    pieces.push(delta(json!({}), Some("tool_calls")));
    pieces.extend(usage_and_done(usage));
    Reply::Sse {
        pieces,
        pause: Duration::ZERO,
    }
}

/// The same reply with `pause` between its pieces.
pub fn slowly(reply: Reply, pause: Duration) -> Reply {
    match reply {
        Reply::Sse { pieces, .. } => Reply::Sse { pieces, pause },
        other => other,
    }
}

/// An OpenAI-style error answer.
pub fn error(status: u16, message: &str, code: &str) -> Reply {
    Reply::Json(
        status,
        json!({"error": {"message": message, "type": "invalid_request_error", "code": code}}),
    )
}

/// A stateless MCP endpoint offering `tools` (MCP tool objects) and
/// answering `tools/call` with `call(name, arguments) -> result`.
pub fn mcp(
    tools: Vec<Value>,
    call: impl Fn(&str, &Value) -> Value + Send + Sync + 'static,
) -> McpHandler {
    Box::new(move |request: &Value| {
        let id = request["id"].clone();
        if id.is_null() {
            return Value::Null;
        }
        match request["method"].as_str() {
            Some("tools/list") => json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}),
            Some("tools/call") => {
                let name = request["params"]["name"].as_str().unwrap_or_default();
                let result = call(name, &request["params"]["arguments"]);
                json!({"jsonrpc": "2.0", "id": id, "result": result})
            }
            _ => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})
            }
        }
    })
}
