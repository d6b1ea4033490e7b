//! The turn loop against a fake gateway (a real HTTP server on a unix
//! socket) with a temporary workspace.

#[path = "../../tests/common/gateway.rs"]
mod fake_gateway;

use std::io::BufReader;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fake_gateway::*;
use pincer_runner_protocol::{
    MAX_RESPONSE_BYTES, Response, StopReason, TurnErrorKind, TurnEvent, TurnLimits, TurnRequest,
    decode_line, encode_line, read_line,
};
use serde_json::{Value, json};

use super::*;

struct Workspace(PathBuf);

impl Workspace {
    fn new() -> Workspace {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pincer-turn-ws-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Workspace(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn request(text: &str) -> TurnRequest {
    TurnRequest {
        turn_id: "t-1".into(),
        model: MODEL.into(),
        messages: vec![
            json!({"role": "system", "content": "You are a test."}),
            json!({"role": "user", "content": text}),
        ],
        limits: TurnLimits::default(),
        gateway_tools: false,
        checked: false,
        resume: None,
    }
}

fn env<'a>(
    gateway: Result<Gateway, String>,
    workspace: &Path,
    enforcer: &'a Enforcer,
    children: &'a Children,
    cancel: &'a Cancel<'a>,
) -> TurnEnv<'a> {
    TurnEnv {
        gateway,
        workspace: workspace.to_path_buf(),
        enforcer,
        children,
        cancel,
        model_idle: Duration::from_secs(10),
    }
}

/// Runs `req` against `gateway` in `workspace`; all events, the last one terminal.
fn run_turn(gateway: &FakeGateway, req: &TurnRequest, workspace: &Path) -> Vec<TurnEvent> {
    run_with(
        Gateway::new(&gateway.url(), TOKEN.into()),
        req,
        workspace,
        Duration::from_secs(10),
    )
}

fn run_with(
    gateway: Result<Gateway, String>,
    req: &TurnRequest,
    workspace: &Path,
    model_idle: Duration,
) -> Vec<TurnEvent> {
    run_judged(gateway, req, workspace, model_idle, &mut |_| {
        panic!("an unchecked turn asked for a verdict")
    })
}

/// Runs `req`, answering each check with `judge(its name and arguments)`.
fn run_judged(
    gateway: Result<Gateway, String>,
    req: &TurnRequest,
    workspace: &Path,
    model_idle: Duration,
    judge: &mut dyn FnMut(&TurnEvent) -> Verdict,
) -> Vec<TurnEvent> {
    let enforcer = Enforcer::unrestricted();
    let children = Children::default();
    let cancel = Cancel::never();
    let mut env = env(gateway, workspace, &enforcer, &children, &cancel);
    env.model_idle = model_idle;
    let events = std::cell::RefCell::new(Vec::new());
    let summary = run(
        req,
        &env,
        &mut |event| {
            events.borrow_mut().push(event);
            true
        },
        &mut || {
            let events = events.borrow();
            let check = events.last().expect("a check before the verdict");
            assert!(matches!(check, TurnEvent::Check { .. }), "{check:?}");
            Some(judge(check))
        },
    );
    let events = events.into_inner();
    let last = events.last().expect("some event");
    assert!(last.is_terminal(), "{events:#?}");
    assert_eq!(summary.end.as_ref(), Some(last));
    assert_eq!(events.iter().filter(|e| e.is_terminal()).count(), 1);
    events
}

fn terminal(events: &[TurnEvent]) -> &TurnEvent {
    events.last().unwrap()
}

fn tool_ends(events: &[TurnEvent]) -> Vec<(String, bool, usize, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolEnd {
                name,
                ok,
                output_bytes,
                truncated,
                ..
            } => Some((name.clone(), *ok, *output_bytes, *truncated)),
            _ => None,
        })
        .collect()
}

/// The `content` of every `tool` message, in order.
fn tool_results(events: &[TurnEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::Message { message } if message["role"] == "tool" => {
                Some(message["content"].as_str().unwrap().to_string())
            }
            _ => None,
        })
        .collect()
}

fn done(events: &[TurnEvent]) -> (String, u32, StopReason) {
    match terminal(events) {
        TurnEvent::Done { reply, steps, stop } => (reply.clone(), *steps, *stop),
        other => panic!("not done: {other:?}\n{events:#?}"),
    }
}

fn failed(events: &[TurnEvent]) -> (TurnErrorKind, String) {
    match terminal(events) {
        TurnEvent::Failed { kind, message } => (*kind, message.clone()),
        other => panic!("not failed: {other:?}"),
    }
}

#[test]
fn plain_text_answer_is_streamed() {
    let gateway = FakeGateway::start(vec![text(&["Hel", "lo, ", "world"], (12, 3))], None);
    let ws = Workspace::new();
    let mut req = request("hi");
    req.limits.max_completion_tokens = Some(256);
    let events = run_turn(&gateway, &req, ws.path());
    let builtins: Vec<String> = tools::NAMES
        .iter()
        .chain(pincer_runner_protocol::HOST_TOOLS.iter())
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        events,
        vec![
            TurnEvent::Started { tools: builtins },
            TurnEvent::TextDelta { text: "Hel".into() },
            TurnEvent::TextDelta {
                text: "lo, ".into()
            },
            TurnEvent::TextDelta {
                text: "world".into()
            },
            TurnEvent::Usage {
                model: MODEL.into(),
                prompt_tokens: 12,
                completion_tokens: 3
            },
            TurnEvent::Message {
                message: json!({"role": "assistant", "content": "Hello, world"})
            },
            TurnEvent::Done {
                reply: "Hello, world".into(),
                steps: 1,
                stop: StopReason::Finished
            },
        ]
    );
    let requests = gateway.requests();
    assert_eq!(requests.len(), 1, "no MCP listing without gateway_tools");
    let sent = &requests[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some(&*format!("Bearer {TOKEN}"))
    );
    assert_eq!(sent.body["model"], MODEL);
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
    assert_eq!(sent.body["max_tokens"], 256);
    assert_eq!(sent.body["messages"], json!(req.messages));
    let offered: Vec<&str> = sent.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, [&tools::NAMES[..], &["send_file"]].concat());
    for tool in sent.body["tools"].as_array().unwrap() {
        assert_eq!(tool["type"], "function");
        assert_eq!(tool["function"]["parameters"]["type"], "object");
        assert!(!tool["function"]["description"].as_str().unwrap().is_empty());
    }
}

#[test]
fn bash_writes_a_file_and_read_reads_it_back() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[(
                    "call_1",
                    "bash",
                    r#"{"command":"printf 'hello from bash\\nline two\\n' > hello.txt && echo written"}"#,
                )],
                (20, 10),
            ),
            tool_calls(&[("call_2", "read", r#"{"path":"hello.txt"}"#)], (40, 8)),
            text(&["The file says hello."], (60, 5)),
        ],
        None,
    );
    let ws = Workspace::new();
    let events = run_turn(&gateway, &request("write hello.txt"), ws.path());
    assert_eq!(
        done(&events),
        ("The file says hello.".into(), 3, StopReason::Finished)
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("hello.txt")).unwrap(),
        "hello from bash\nline two\n"
    );
    assert_eq!(
        tool_results(&events),
        vec![
            "written\n[exit status 0]".to_string(),
            "1\thello from bash\n2\tline two\n".to_string(),
        ]
    );
    assert!(
        tool_ends(&events)
            .iter()
            .all(|(_, ok, _, truncated)| *ok && !truncated)
    );
    // The event order of a tool step.
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            TurnEvent::Started { .. } => "started",
            TurnEvent::TextDelta { .. } => "text",
            TurnEvent::Message { message } if message["role"] == "tool" => "tool-message",
            TurnEvent::Message { .. } => "assistant-message",
            TurnEvent::ToolStart { .. } => "tool-start",
            TurnEvent::ToolEnd { .. } => "tool-end",
            TurnEvent::Check { .. } => "check",
            TurnEvent::Usage { .. } => "usage",
            TurnEvent::Notice { .. } => "notice",
            TurnEvent::Done { .. } => "done",
            TurnEvent::Failed { .. } => "failed",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "started",
            "usage",
            "assistant-message",
            "tool-start",
            "tool-end",
            "tool-message",
            "usage",
            "assistant-message",
            "tool-start",
            "tool-end",
            "tool-message",
            "text",
            "usage",
            "assistant-message",
            "done"
        ]
    );
    // The history sent back to the model holds the calls and their results.
    let chats = gateway.chat_requests();
    assert_eq!(chats.len(), 3);
    let history = chats[2].body["messages"].as_array().unwrap();
    assert_eq!(history.len(), 6);
    assert_eq!(
        history[2],
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "bash", "arguments": r#"{"command":"printf 'hello from bash\\nline two\\n' > hello.txt && echo written"}"#}
        }]})
    );
    assert_eq!(
        history[3],
        json!({"role": "tool", "tool_call_id": "call_1", "content": "written\n[exit status 0]"})
    );
    assert_eq!(history[5]["tool_call_id"], "call_2");
}

#[test]
fn edit_glob_and_grep() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.path().join("src/deep")).unwrap();
    std::fs::write(
        ws.path().join("src/main.rs"),
        "fn main() {\n    old();\n}\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("src/deep/lib.rs"),
        "// TODO: One\n// todo: two\n",
    )
    .unwrap();
    std::fs::write(ws.path().join("notes.txt"), "TODO: not code\n").unwrap();
    std::fs::write(ws.path().join("blob.bin"), b"TODO\0binary").unwrap();
    std::fs::write(ws.path().join("twice.txt"), "a a").unwrap();
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[
                    (
                        "e1",
                        "edit",
                        r#"{"path":"src/main.rs","old_string":"old();","new_string":"new();"}"#,
                    ),
                    (
                        "e2",
                        "edit",
                        r#"{"path":"twice.txt","old_string":"a","new_string":"b"}"#,
                    ),
                    (
                        "e3",
                        "edit",
                        r#"{"path":"twice.txt","old_string":"zzz","new_string":"b"}"#,
                    ),
                    (
                        "e4",
                        "edit",
                        r#"{"path":"twice.txt","old_string":"a","new_string":"b","replace_all":true}"#,
                    ),
                    ("g1", "glob", r#"{"pattern":"**/*.rs"}"#),
                    ("g2", "glob", r#"{"pattern":"*.rs","path":"src"}"#),
                    ("r1", "grep", r#"{"pattern":"todo","ignore_case":true}"#),
                    ("r2", "grep", r#"{"pattern":"TODO","glob":"*.rs"}"#),
                    ("r3", "grep", r#"{"pattern":"("}"#),
                ],
                (10, 10),
            ),
            text(&["ok"], (10, 1)),
        ],
        None,
    );
    let events = run_turn(&gateway, &request("tidy up"), ws.path());
    assert_eq!(done(&events).2, StopReason::Finished);
    let results = tool_results(&events);
    let oks: Vec<bool> = tool_ends(&events).iter().map(|t| t.1).collect();
    assert_eq!(
        oks,
        [true, false, false, true, true, true, true, true, false],
        "{results:#?}"
    );
    assert_eq!(results[0], "replaced 1 occurrence in src/main.rs");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("src/main.rs")).unwrap(),
        "fn main() {\n    new();\n}\n"
    );
    assert!(results[1].contains("occurs 2 times") && results[1].contains("replace_all"));
    assert!(
        results[2].contains("not found in twice.txt"),
        "{}",
        results[2]
    );
    assert_eq!(results[3], "replaced 2 occurrences in twice.txt");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("twice.txt")).unwrap(),
        "b b"
    );
    assert_eq!(results[4], "src/deep/lib.rs\nsrc/main.rs\n");
    assert_eq!(results[5], "src/main.rs\n", "`*` stays within a directory");
    assert_eq!(
        results[6],
        "notes.txt:1:TODO: not code\nsrc/deep/lib.rs:1:// TODO: One\nsrc/deep/lib.rs:2:// todo: two\n",
        "binary files are skipped"
    );
    assert_eq!(results[7], "src/deep/lib.rs:1:// TODO: One\n");
    assert!(
        results[8].contains("invalid regular expression"),
        "{}",
        results[8]
    );
}

#[test]
fn read_pages_through_a_file() {
    let ws = Workspace::new();
    let lines: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    std::fs::write(ws.path().join("ten.txt"), lines).unwrap();
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[
                    ("a", "read", r#"{"path":"ten.txt","offset":4,"limit":2}"#),
                    ("b", "read", r#"{"path":"ten.txt","offset":11}"#),
                    ("c", "read", r#"{"path":"missing.txt"}"#),
                    ("d", "read", r#"{"path":"."}"#),
                    ("e", "write", r#"{"path":"new/dir/f.txt","content":"x"}"#),
                ],
                (1, 1),
            ),
            text(&["ok"], (1, 1)),
        ],
        None,
    );
    let events = run_turn(&gateway, &request("read"), ws.path());
    let results = tool_results(&events);
    assert_eq!(
        results[0],
        "4\tline 4\n5\tline 5\n[... lines 4-5 of 10 shown; read on with offset 6]\n"
    );
    assert!(results[1].contains("past the end"), "{}", results[1]);
    assert!(
        results[2].starts_with("error: missing.txt:"),
        "{}",
        results[2]
    );
    assert!(results[3].contains("is a directory"), "{}", results[3]);
    assert_eq!(results[4], "wrote 1 bytes to new/dir/f.txt");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("new/dir/f.txt")).unwrap(),
        "x"
    );
}

#[test]
fn invalid_tool_arguments_are_reported_to_the_model() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[
                    ("c1", "bash", r#"{"command": "echo hi""#),
                    ("c2", "bash", r#"["echo"]"#),
                    ("c3", "read", r#"{"file":"x"}"#),
                ],
                (5, 5),
            ),
            text(&["sorry"], (5, 5)),
        ],
        None,
    );
    let ws = Workspace::new();
    let events = run_turn(&gateway, &request("go"), ws.path());
    assert_eq!(done(&events), ("sorry".into(), 2, StopReason::Finished));
    let results = tool_results(&events);
    assert!(results[0].starts_with("error: the arguments of this bash call are not valid JSON"));
    assert!(
        results[1].contains("must be a JSON object"),
        "{}",
        results[1]
    );
    assert!(
        results[2].contains("invalid arguments for read: missing field `path`"),
        "{}",
        results[2]
    );
    assert!(tool_ends(&events).iter().all(|t| !t.1));
}

#[test]
fn unknown_tool_lists_the_available_ones() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(&[("c1", "launch_rockets", "{}")], (5, 5)),
            text(&["ok"], (5, 5)),
        ],
        None,
    );
    let ws = Workspace::new();
    let events = run_turn(&gateway, &request("go"), ws.path());
    assert_eq!(done(&events).2, StopReason::Finished);
    let results = tool_results(&events);
    assert_eq!(
        results[0],
        "error: there is no tool named \"launch_rockets\"; the available tools are: \
         bash, read, write, edit, glob, grep, send_file"
    );
    assert!(!tool_ends(&events)[0].1);
}

#[test]
fn huge_output_is_cut_before_it_enters_the_context() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[(
                    "c1",
                    "bash",
                    r#"{"command":"echo FIRST; yes 0123456789 | head -n 30000; echo LAST"}"#,
                )],
                (5, 5),
            ),
            text(&["big"], (5, 5)),
        ],
        None,
    );
    let ws = Workspace::new();
    let mut req = request("go");
    req.limits.max_tool_output_bytes = 1000;
    let events = run_turn(&gateway, &req, ws.path());
    let full = "FIRST\n".len() + 30000 * 11 + "LAST\n".len() + "[exit status 0]".len();
    assert_eq!(tool_ends(&events), vec![("bash".into(), true, full, true)]);
    let content = &tool_results(&events)[0];
    let marker = format!("\n[... {} bytes truncated ...]\n", full - 1000);
    assert!(content.contains(&marker), "{content}");
    assert_eq!(content.len(), 1000 + marker.len());
    assert!(content.starts_with("FIRST\n0123456789\n"));
    assert!(content.ends_with("0123456789\nLAST\n[exit status 0]"));
    // What the model got back is the cut text.
    let history = &gateway.chat_requests()[1].body["messages"];
    assert_eq!(history[3]["content"].as_str(), Some(content.as_str()));
}

#[test]
fn endless_tool_loop_stops_at_the_step_limit() {
    let replies = (0..10)
        .map(|i| {
            tool_calls(
                &[(&*format!("c{i}"), "bash", r#"{"command":"true"}"#)],
                (5, 5),
            )
        })
        .collect();
    let gateway = FakeGateway::start(replies, None);
    let ws = Workspace::new();
    let mut req = request("loop");
    req.limits.max_steps = 3;
    let events = run_turn(&gateway, &req, ws.path());
    let (reply, steps, stop) = done(&events);
    assert_eq!((steps, stop), (3, StopReason::StepLimit));
    assert_eq!(
        reply,
        "The turn stopped after 3 steps (the step limit was reached) before the model gave a final answer."
    );
    assert_eq!(gateway.chat_requests().len(), 3);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::Notice { message } if message.contains("step limit")))
    );
    // Every call of the last step got its result: the stored history stays valid.
    assert_eq!(tool_results(&events).len(), 3);
}

#[test]
fn token_limit_ends_the_turn_with_the_last_text() {
    let gateway = FakeGateway::start(
        vec![
            Reply::Sse {
                pieces: vec![
                    chunk(
                        json!([{"index":0,"delta":{"role":"assistant","content":"Let me look."},"finish_reason":null}]),
                        None,
                    ),
                    chunk(
                        json!([{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"true\"}"}}]},"finish_reason":"tool_calls"}]),
                        None,
                    ),
                    chunk(
                        json!([]),
                        Some(json!({"prompt_tokens":90,"completion_tokens":20,"total_tokens":110})),
                    ),
                    "data: [DONE]\n\n".into(),
                ],
                pause: Duration::ZERO,
            },
            text(&["never asked"], (1, 1)),
        ],
        None,
    );
    let ws = Workspace::new();
    let mut req = request("go");
    req.limits.max_total_tokens = 100;
    let events = run_turn(&gateway, &req, ws.path());
    assert_eq!(
        done(&events),
        ("Let me look.".into(), 1, StopReason::TokenLimit)
    );
    assert_eq!(gateway.chat_requests().len(), 1);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, TurnEvent::Notice { message } if message.contains("110 of 100")))
    );
}

#[test]
fn gateway_errors_reach_the_user_verbatim() {
    let message = "budget exceeded for workspace demo: 5.02 of 5.00 USD this month";
    let gateway = FakeGateway::start(vec![error(402, message, "budget_exceeded")], None);
    let ws = Workspace::new();
    let events = run_turn(&gateway, &request("hi"), ws.path());
    assert!(matches!(events[0], TurnEvent::Started { .. }));
    assert_eq!(
        failed(&events),
        (TurnErrorKind::Gateway, message.to_string())
    );

    // A wrong token gets the gateway's own 401 message.
    let gateway = FakeGateway::start(vec![text(&["x"], (1, 1))], None);
    let events = run_with(
        Gateway::new(&gateway.url(), "wrong".into()),
        &request("hi"),
        ws.path(),
        Duration::from_secs(5),
    );
    assert_eq!(
        failed(&events),
        (TurnErrorKind::Gateway, "invalid pincer key".to_string())
    );

    // An error in the middle of the stream.
    let gateway = FakeGateway::start(
        vec![Reply::Sse {
            pieces: vec![
                chunk(json!([{"index":0,"delta":{"content":"par"},"finish_reason":null}]), None),
                "data: {\"error\":{\"message\":\"upstream provider failed: overloaded\",\"type\":\"server_error\",\"code\":null}}\n\n".into(),
            ],
            pause: Duration::ZERO,
        }],
        None,
    );
    let events = run_turn(&gateway, &request("hi"), ws.path());
    assert_eq!(
        failed(&events),
        (
            TurnErrorKind::Gateway,
            "upstream provider failed: overloaded".to_string()
        )
    );
}

#[test]
fn unreachable_gateway_names_the_socket() {
    let ws = Workspace::new();
    let socket = ws.path().join("no-gateway.sock");
    let url = format!("unix://{}", socket.display());
    let mut req = request("hi");
    req.gateway_tools = true;
    let events = run_with(
        Gateway::new(&url, TOKEN.into()),
        &req,
        ws.path(),
        Duration::from_secs(5),
    );
    assert!(matches!(events[0], TurnEvent::Started { .. }));
    assert!(
        matches!(&events[1], TurnEvent::Notice { message } if message.contains("only the built-in tools"))
    );
    let (kind, message) = failed(&events);
    assert_eq!(kind, TurnErrorKind::GatewayUnreachable);
    assert!(message.contains(&socket.display().to_string()), "{message}");

    // No gateway configured at all.
    let events = run_with(
        Err("PINCER_GATEWAY_URL is not set".into()),
        &req,
        ws.path(),
        Duration::from_secs(5),
    );
    assert_eq!(
        events,
        vec![TurnEvent::Failed {
            kind: TurnErrorKind::GatewayUnreachable,
            message: "PINCER_GATEWAY_URL is not set".into()
        }]
    );
}

#[test]
fn silent_gateway_times_out() {
    let gateway = FakeGateway::start(vec![Reply::Hang], None);
    let ws = Workspace::new();
    let started = Instant::now();
    let events = run_with(
        Gateway::new(&gateway.url(), TOKEN.into()),
        &request("hi"),
        ws.path(),
        Duration::from_millis(500),
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let (kind, message) = failed(&events);
    assert_eq!(kind, TurnErrorKind::GatewayUnreachable);
    assert!(message.contains("did not answer within 500ms"), "{message}");
}

#[test]
fn unparsable_stream_is_model_output() {
    let gateway = FakeGateway::start(
        vec![Reply::Sse {
            pieces: vec!["data: {\"choices\": [oops\n\n".into()],
            pause: Duration::ZERO,
        }],
        None,
    );
    let ws = Workspace::new();
    let events = run_turn(&gateway, &request("hi"), ws.path());
    assert_eq!(failed(&events).0, TurnErrorKind::ModelOutput);

    // A stream that stops in the middle.
    let gateway = FakeGateway::start(
        vec![Reply::Sse {
            pieces: vec![chunk(
                json!([{"index":0,"delta":{"content":"half"},"finish_reason":null}]),
                None,
            )],
            pause: Duration::ZERO,
        }],
        None,
    );
    let events = run_turn(&gateway, &request("hi"), ws.path());
    let (kind, message) = failed(&events);
    assert_eq!(kind, TurnErrorKind::ModelOutput);
    assert!(
        message.contains("ended before the answer was complete"),
        "{message}"
    );
}

#[test]
fn bad_requests_fail_cleanly() {
    let gateway = FakeGateway::start(Vec::new(), None);
    let ws = Workspace::new();
    let mut req = request("hi");
    req.limits.max_steps = 0;
    assert_eq!(
        failed(&run_turn(&gateway, &req, ws.path())).0,
        TurnErrorKind::BadRequest
    );
    let mut req = request("hi");
    req.messages = vec![json!("just a string")];
    assert_eq!(
        failed(&run_turn(&gateway, &req, ws.path())).0,
        TurnErrorKind::BadRequest
    );
    assert!(gateway.requests().is_empty());
}

#[test]
fn tool_timeout_kills_the_command() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[(
                    "c1",
                    "bash",
                    r#"{"command":"sleep 30 & sleep 30; echo never"}"#,
                )],
                (1, 1),
            ),
            text(&["gave up"], (1, 1)),
        ],
        None,
    );
    let ws = Workspace::new();
    let mut req = request("go");
    req.limits.tool_timeout_ms = 300;
    let started = Instant::now();
    let events = run_turn(&gateway, &req, ws.path());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(done(&events).0, "gave up");
    assert!(!tool_ends(&events)[0].1);
    let result = &tool_results(&events)[0];
    assert!(result.contains("timed out after 300 ms"), "{result}");
    assert!(!result.contains("never"));
}

#[test]
fn commands_never_see_the_gateway_token() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(&[("c1", "bash", r#"{"command":"env"}"#)], (1, 1)),
            text(&["done"], (1, 1)),
        ],
        None,
    );
    let ws = Workspace::new();
    let events = run_turn(&gateway, &request("env"), ws.path());
    let env_output = &tool_results(&events)[0];
    assert!(
        env_output.contains("PATH=/usr/local/bin:/usr/bin:/bin"),
        "{env_output}"
    );
    assert!(!env_output.contains(TOKEN), "{env_output}");
    assert!(!env_output.contains("PINCER_"), "{env_output}");
    // The token did go to the gateway, as the bearer credential.
    assert!(
        gateway
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&*format!("Bearer {TOKEN}")))
    );
}

#[test]
fn gateway_tools_are_listed_and_called_over_mcp() {
    let recall = json!({
        "name": "memory__recall",
        "description": "Recall facts",
        "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    });
    let failing = json!({"name": "skill__fail", "inputSchema": {"type": "object"}});
    let shadow = json!({"name": "bash", "description": "not the real bash", "inputSchema": {"type": "object"}});
    let mcp_handler = mcp(vec![recall, failing, shadow], |name, args| match name {
        "memory__recall" => json!({"content": [
            {"type": "text", "text": format!("recalled: {}", args["query"].as_str().unwrap_or("?"))},
            {"type": "text", "text": "likes tea"}
        ], "isError": false}),
        _ => json!({"content": [{"type": "text", "text": "skill crashed"}], "isError": true}),
    });
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[
                    ("m1", "memory__recall", r#"{"query":"drinks"}"#),
                    ("m2", "skill__fail", "{}"),
                ],
                (1, 1),
            ),
            text(&["You like tea."], (1, 1)),
        ],
        Some(mcp_handler),
    );
    let ws = Workspace::new();
    let mut req = request("what do I drink?");
    req.gateway_tools = true;
    let events = run_turn(&gateway, &req, ws.path());
    let TurnEvent::Started { tools } = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(
        tools,
        &[
            "bash",
            "read",
            "write",
            "edit",
            "glob",
            "grep",
            "send_file",
            "memory__recall",
            "skill__fail"
        ]
    );
    assert_eq!(done(&events).0, "You like tea.");
    assert_eq!(
        tool_ends(&events)
            .iter()
            .map(|t| (t.0.as_str(), t.1))
            .collect::<Vec<_>>(),
        [("memory__recall", true), ("skill__fail", false)]
    );
    assert_eq!(
        tool_results(&events),
        ["recalled: drinks\nlikes tea", "skill crashed"]
    );

    let requests = gateway.requests();
    let mcp_requests: Vec<&Recorded> = requests.iter().filter(|r| r.path == "/mcp").collect();
    assert_eq!(mcp_requests.len(), 3);
    for r in &mcp_requests {
        assert_eq!(r.header("authorization"), Some(&*format!("Bearer {TOKEN}")));
        assert_eq!(
            r.header("accept"),
            Some("application/json, text/event-stream")
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(
            r.header("mcp-protocol-version"),
            Some(mcp::PROTOCOL_VERSION)
        );
        assert_eq!(r.body["jsonrpc"], "2.0");
    }
    assert_eq!(mcp_requests[0].body["method"], "tools/list");
    assert_eq!(mcp_requests[1].body["method"], "tools/call");
    assert_eq!(
        mcp_requests[1].body["params"],
        json!({"name": "memory__recall", "arguments": {"query": "drinks"}})
    );
    // The model was offered the gateway tool with its schema.
    let offered = &gateway.chat_requests()[0].body["tools"];
    let recall_spec = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "memory__recall")
        .unwrap();
    assert_eq!(
        recall_spec["function"]["parameters"]["required"],
        json!(["query"])
    );
    assert_eq!(recall_spec["function"]["description"], "Recall facts");
}

#[test]
fn failed_tool_listing_is_a_notice() {
    let handler: McpHandler = Box::new(
        |request: &Value| json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32603, "message": "skills store unavailable"}}),
    );
    let gateway = FakeGateway::start(vec![text(&["hi"], (1, 1))], Some(handler));
    let ws = Workspace::new();
    let mut req = request("hi");
    req.gateway_tools = true;
    let events = run_turn(&gateway, &req, ws.path());
    assert!(
        matches!(&events[1], TurnEvent::Notice { message } if message.contains("skills store unavailable"))
    );
    assert_eq!(done(&events).0, "hi");
}

#[test]
fn host_disconnect_aborts_a_running_tool() {
    let gateway = FakeGateway::start(
        vec![tool_calls(
            &[(
                "c1",
                "bash",
                r#"{"command":"sleep 30; echo never > after.txt"}"#,
            )],
            (1, 1),
        )],
        None,
    );
    let ws = Workspace::new();
    let (ours, theirs) = UnixStream::pair().unwrap();
    // The "host": reads events until the tool starts, then hangs up.
    let host = std::thread::spawn(move || {
        let mut reader = BufReader::new(&theirs);
        loop {
            let line = read_line(&mut reader, MAX_RESPONSE_BYTES).unwrap();
            let event: Response = decode_line(&line, MAX_RESPONSE_BYTES).unwrap();
            if matches!(event, Response::Event(TurnEvent::ToolStart { .. })) {
                return;
            }
        }
    });
    let enforcer = Enforcer::unrestricted();
    let children = Children::default();
    let cancel = Cancel::on_hangup(ours.as_fd());
    let env = env(
        Gateway::new(&gateway.url(), TOKEN.into()),
        ws.path(),
        &enforcer,
        &children,
        &cancel,
    );
    let started = Instant::now();
    let mut writer = &ours;
    let summary = run(
        &request("sleep"),
        &env,
        &mut |event| {
            use std::io::Write;
            writer
                .write_all(&encode_line(&Response::Event(event)))
                .is_ok()
        },
        &mut || None,
    );
    host.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(summary.end.is_none(), "{summary:?}");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!ws.path().join("after.txt").exists());
    assert_eq!(gateway.chat_requests().len(), 1);
}

/// A checked turn asks before each call and runs exactly the arguments it
/// showed; a refused call does not run and the model reads why.
#[test]
fn a_checked_turn_asks_before_each_call_and_a_refusal_does_not_run() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[
                    ("call_1", "bash", r#"{"command":"echo yes > ran.txt"}"#),
                    ("call_2", "write", r#"{"path":"no.txt","content":"x"}"#),
                ],
                (20, 10),
            ),
            text(&["Done."], (30, 5)),
        ],
        None,
    );
    let ws = Workspace::new();
    let mut req = request("do two things");
    req.checked = true;
    let mut asked = Vec::new();
    let events = run_judged(
        Gateway::new(&gateway.url(), TOKEN.into()),
        &req,
        ws.path(),
        Duration::from_secs(10),
        &mut |check| {
            let TurnEvent::Check {
                call_id,
                name,
                arguments,
            } = check
            else {
                unreachable!()
            };
            asked.push((call_id.clone(), name.clone(), arguments.clone()));
            if name == "bash" {
                Verdict::Run
            } else {
                Verdict::Refuse {
                    message: "denied by U1: not now".into(),
                }
            }
        },
    );
    assert_eq!(done(&events).0, "Done.");
    assert_eq!(
        asked,
        [
            (
                "call_1".to_string(),
                "bash".to_string(),
                json!({"command": "echo yes > ran.txt"})
            ),
            (
                "call_2".to_string(),
                "write".to_string(),
                json!({"path": "no.txt", "content": "x"})
            ),
        ]
    );
    assert!(ws.path().join("ran.txt").exists());
    assert!(!ws.path().join("no.txt").exists());
    assert_eq!(
        tool_results(&events),
        ["[exit status 0]", "error: denied by U1: not now"]
    );
}

/// A host tool (`send_file`) is asked of the host even in a turn that is
/// not checked; what the host did is the call's result, and a host that
/// only says "run" (it did not carry it out) is an error, not a success.
#[test]
fn host_tools_are_carried_out_by_the_host_even_unchecked() {
    let gateway = FakeGateway::start(
        vec![
            tool_calls(
                &[
                    ("call_1", "send_file", r#"{"path":"out.csv"}"#),
                    ("call_2", "send_file", r#"{"path":"b.csv"}"#),
                ],
                (20, 10),
            ),
            text(&["Sent."], (30, 5)),
        ],
        None,
    );
    let ws = Workspace::new();
    let req = request("send it");
    assert!(!req.checked);
    let mut asked = Vec::new();
    let events = run_judged(
        Gateway::new(&gateway.url(), TOKEN.into()),
        &req,
        ws.path(),
        Duration::from_secs(10),
        &mut |check| {
            let TurnEvent::Check {
                name, arguments, ..
            } = check
            else {
                unreachable!()
            };
            asked.push((name.clone(), arguments.clone()));
            if arguments["path"] == "out.csv" {
                Verdict::Ran {
                    ok: true,
                    output: "out.csv is queued".into(),
                }
            } else {
                Verdict::Run
            }
        },
    );
    assert_eq!(done(&events).0, "Sent.");
    assert_eq!(asked.len(), 2, "{asked:?}");
    let results = tool_results(&events);
    assert_eq!(results[0], "out.csv is queued");
    assert!(
        results[1].starts_with("error: send_file is carried out by the host"),
        "{results:?}"
    );
    assert_eq!(
        tool_ends(&events).iter().map(|t| t.1).collect::<Vec<_>>(),
        [true, false]
    );
}

/// A resumed turn runs the decided call first without asking again, checks
/// the other unanswered calls of the same message, and goes on.
#[test]
fn a_resumed_turn_runs_the_decided_call_then_checks_the_rest() {
    let gateway = FakeGateway::start(vec![text(&["All done."], (30, 5))], None);
    let ws = Workspace::new();
    let mut req = request("two files");
    req.checked = true;
    req.messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "write", "arguments": r#"{"path":"a.txt","content":"A"}"#}},
        {"id": "c2", "type": "function", "function": {"name": "write", "arguments": r#"{"path":"b.txt","content":"B"}"#}},
    ]}));
    req.resume = Some(pincer_runner_protocol::Resume {
        call_id: "c1".into(),
        verdict: Verdict::Run,
    });
    let mut asked = Vec::new();
    let events = run_judged(
        Gateway::new(&gateway.url(), TOKEN.into()),
        &req,
        ws.path(),
        Duration::from_secs(10),
        &mut |check| {
            if let TurnEvent::Check { call_id, .. } = check {
                asked.push(call_id.clone());
            }
            Verdict::Refuse {
                message: "no".into(),
            }
        },
    );
    assert_eq!(done(&events).0, "All done.");
    assert_eq!(asked, ["c2"]);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "A"
    );
    assert!(!ws.path().join("b.txt").exists());
    // the model saw both results, in order
    let history = gateway.chat_requests()[0].body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let ids: Vec<&str> = history
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(ids, ["c1", "c2"]);

    // a resume naming a call that is not pending fails cleanly
    let mut bad = req.clone();
    bad.resume = Some(pincer_runner_protocol::Resume {
        call_id: "c9".into(),
        verdict: Verdict::Run,
    });
    let events = run_turn(&gateway, &bad, ws.path());
    let (kind, message) = failed(&events);
    assert_eq!(kind, TurnErrorKind::BadRequest);
    assert!(message.contains("c9"), "{message}");
}
