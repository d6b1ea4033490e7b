//! Agent turns over the runner's socket, against a fake gateway: events are
//! streamed as they happen, the runner keeps answering other connections
//! meanwhile, and a host that hangs up aborts the turn.

mod common;

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::gateway::*;
use common::*;
use pincer_runner_protocol::{
    GATEWAY_URL_ENV, Grant, MAX_RESPONSE_BYTES, Request, Response, StopReason, TurnErrorKind,
    TurnEvent, TurnLimits, TurnRequest, decode_line, encode_line, read_line,
};
use serde_json::json;

fn turn_request(id: &str) -> TurnRequest {
    TurnRequest {
        turn_id: id.into(),
        model: MODEL.into(),
        messages: vec![json!({"role": "user", "content": "hello"})],
        limits: TurnLimits::default(),
        gateway_tools: false,
        checked: false,
        resume: None,
    }
}

/// A runner pointed at `gateway` and granted the token, as the host does
/// after start (the token is in no environment).
fn runner_for(gateway: &FakeGateway) -> Runner {
    let runner = Runner::start_with(None, &[(GATEWAY_URL_ENV, gateway.url())]);
    assert!(!runner.status().granted);
    assert_eq!(
        runner.call(&Request::Grant(Grant {
            token: TOKEN.to_string()
        })),
        Response::Ok
    );
    assert!(runner.status().granted);
    runner
}

/// Sends a turn; events arrive on the channel with their arrival time.
fn start_turn(
    runner: &Runner,
    request: &TurnRequest,
) -> (UnixStream, mpsc::Receiver<(Instant, TurnEvent)>) {
    let mut stream = UnixStream::connect(&runner.socket).expect("connect");
    stream
        .write_all(&encode_line(&Request::Turn(request.clone())))
        .expect("send");
    let reader = stream.try_clone().expect("clone");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(reader);
        while let Ok(line) = read_line(&mut reader, MAX_RESPONSE_BYTES) {
            match decode_line::<Response>(&line, MAX_RESPONSE_BYTES) {
                Ok(Response::Event(event)) => {
                    if tx.send((Instant::now(), event)).is_err() {
                        return;
                    }
                }
                other => panic!("not an event: {other:?}"),
            }
        }
    });
    (stream, rx)
}

fn collect(rx: &mpsc::Receiver<(Instant, TurnEvent)>) -> Vec<(Instant, TurnEvent)> {
    let mut events = Vec::new();
    loop {
        let (at, event) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the turn ended without a terminal event");
        let terminal = event.is_terminal();
        events.push((at, event));
        if terminal {
            return events;
        }
    }
}

#[test]
fn events_stream_while_other_requests_are_served() {
    let parts = ["one ", "two ", "three ", "four ", "five ", "six"];
    let gateway = FakeGateway::start(
        vec![slowly(text(&parts, (9, 6)), Duration::from_millis(300))],
        None,
    );
    let runner = runner_for(&gateway);
    let (_stream, rx) = start_turn(&runner, &turn_request("t-serve"));
    let (_, first) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(first, TurnEvent::Started { .. }), "{first:?}");

    // The turn takes about two seconds; the runner answers a ping at once.
    std::thread::sleep(Duration::from_millis(400));
    let asked = Instant::now();
    let status = runner.status();
    assert!(asked.elapsed() < Duration::from_secs(1));
    assert_eq!(status.pid, runner.child.id());
    let result = runner.run(&["echo", "exec during a turn"]);
    assert_eq!(result.stdout, "exec during a turn\n");

    let events = collect(&rx);
    let deltas: Vec<&(Instant, TurnEvent)> = events
        .iter()
        .filter(|(_, e)| matches!(e, TurnEvent::TextDelta { .. }))
        .collect();
    assert_eq!(deltas.len(), parts.len());
    // Written as they happened, not all at the end.
    let spread = deltas[deltas.len() - 1].0 - deltas[0].0;
    assert!(spread >= Duration::from_millis(1000), "{spread:?}");
    let (_, last) = events.last().unwrap();
    assert_eq!(
        last,
        &TurnEvent::Done {
            reply: parts.concat(),
            steps: 1,
            stop: StopReason::Finished
        }
    );
    // The gateway got the token the host granted the runner.
    assert_eq!(
        gateway.chat_requests()[0].header("authorization"),
        Some(&*format!("Bearer {TOKEN}"))
    );
    assert!(eventually(Duration::from_secs(2), || runner
        .log()
        .contains(
            "turn \"t-serve\" model \"test-model\" -> done (Finished), 1 steps, 0 tool calls"
        )));
}

#[test]
fn without_gateway_the_turn_fails_clearly() {
    let runner = Runner::start(None);
    let (_stream, rx) = start_turn(&runner, &turn_request("t-none"));
    let events = collect(&rx);
    assert_eq!(events.len(), 1);
    match &events[0].1 {
        TurnEvent::Failed { kind, message } => {
            assert_eq!(*kind, TurnErrorKind::GatewayUnreachable);
            assert!(message.contains(GATEWAY_URL_ENV), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn host_hanging_up_aborts_the_turn() {
    let gateway = FakeGateway::start(vec![Reply::Hang], None);
    let runner = runner_for(&gateway);
    let (stream, rx) = start_turn(&runner, &turn_request("t-gone"));
    let (_, first) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(matches!(first, TurnEvent::Started { .. }));
    assert!(eventually(Duration::from_secs(5), || gateway
        .chat_requests()
        .len()
        == 1));
    stream.shutdown(std::net::Shutdown::Both).expect("shutdown");
    drop(stream);
    // The model call would wait minutes; the runner notices the hangup at once.
    assert!(
        eventually(Duration::from_secs(3), || runner
            .log()
            .contains("turn \"t-gone\" model \"test-model\" -> aborted")),
        "{}",
        runner.log()
    );
    assert_eq!(runner.status().pid, runner.child.id());
}

#[test]
fn turn_subcommand_prints_events() {
    let gateway = FakeGateway::start(vec![text(&["Hi ", "there"], (3, 2))], None);
    let runner = runner_for(&gateway);
    let output = Command::new(AGENT)
        .args(["turn", "--socket"])
        .arg(&runner.socket)
        .args(["--model", MODEL, "--no-gateway-tools", "--text", "hello"])
        .output()
        .expect("run turn");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let events: Vec<TurnEvent> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(matches!(events[0], TurnEvent::Started { .. }));
    assert_eq!(
        events.last(),
        Some(&TurnEvent::Done {
            reply: "Hi there".into(),
            steps: 1,
            stop: StopReason::Finished
        })
    );
    let sent = &gateway.chat_requests()[0].body;
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": "hello"}])
    );
}
