//! `pincer-agent exec`, `ping` and `turn`: clients of a running runner,
//! handy with `docker exec`.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use pincer_runner_protocol::{
    ErrorKind, ExecRequest, MAX_RESPONSE_BYTES, Request, Response, TurnEvent, TurnRequest,
    decode_line, encode_line, read_line,
};

/// Exit codes of `pincer-agent exec` besides the command's own.
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_BAD_REQUEST: i32 = 2;
pub const EXIT_TIMEOUT: i32 = 124;
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
pub const EXIT_NOT_FOUND: i32 = 127;

/// Sends one request and reads the response.
pub fn call(socket: &Path, request: &Request, timeout: Duration) -> Result<Response, String> {
    let where_ = socket.display();
    let mut stream =
        UnixStream::connect(socket).map_err(|e| format!("cannot connect to {where_}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("{where_}: {e}"))?;
    stream
        .write_all(&encode_line(request))
        .map_err(|e| format!("sending to {where_}: {e}"))?;
    let line = read_line(&mut BufReader::new(&stream), MAX_RESPONSE_BYTES)
        .map_err(|e| format!("reading from {where_}: {e}"))?;
    decode_line(&line, MAX_RESPONSE_BYTES).map_err(|e| format!("reading from {where_}: {e}"))
}

/// `pincer-agent ping`: prints the runner's status as JSON.
pub fn ping(socket: &Path) -> i32 {
    match call(socket, &Request::Ping, Duration::from_secs(10)) {
        Ok(Response::Pong(status)) => match serde_json::to_string_pretty(&status) {
            Ok(json) => {
                println!("{json}");
                0
            }
            Err(e) => {
                eprintln!("pincer-agent: {e}");
                EXIT_FAILURE
            }
        },
        Ok(other) => report_unexpected(&other),
        Err(e) => {
            eprintln!("pincer-agent: {e}");
            EXIT_FAILURE
        }
    }
}

/// `pincer-agent exec`: runs a command through the runner, relays its output
/// and exits like it (128+signal when killed, 124 on timeout, 126 when it may
/// not run, 127 when not found).
pub fn exec(socket: &Path, request: ExecRequest) -> i32 {
    let timeout = Duration::from_millis(request.timeout_ms.saturating_add(30_000));
    let result = match call(socket, &Request::Exec(request), timeout) {
        Ok(Response::Exec(result)) => result,
        Ok(Response::Error { kind, message }) => {
            eprintln!("pincer-agent: {kind}: {message}");
            return match kind {
                ErrorKind::NotFound => EXIT_NOT_FOUND,
                ErrorKind::PermissionDenied | ErrorKind::SpawnFailed => EXIT_CANNOT_EXECUTE,
                ErrorKind::BadRequest => EXIT_BAD_REQUEST,
                ErrorKind::Internal => EXIT_FAILURE,
            };
        }
        Ok(other) => return report_unexpected(&other),
        Err(e) => {
            eprintln!("pincer-agent: {e}");
            return EXIT_FAILURE;
        }
    };
    let _ = std::io::stdout().write_all(result.stdout.as_bytes());
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().write_all(result.stderr.as_bytes());
    if result.truncated {
        eprintln!("pincer-agent: output truncated");
    }
    if result.timed_out {
        eprintln!("pincer-agent: timed out after {} ms", result.duration_ms);
        return EXIT_TIMEOUT;
    }
    match (result.exit_code, result.signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => EXIT_FAILURE,
    }
}

/// `pincer-agent turn`: runs a turn and prints each event as a JSON line;
/// 0 when it is done, 1 otherwise.
pub fn turn(socket: &Path, request: TurnRequest) -> i32 {
    let where_ = socket.display();
    let stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(e) => {
            eprintln!("pincer-agent: cannot connect to {where_}: {e}");
            return EXIT_FAILURE;
        }
    };
    let mut writer = &stream;
    if let Err(e) = writer.write_all(&encode_line(&Request::Turn(request))) {
        eprintln!("pincer-agent: sending to {where_}: {e}");
        return EXIT_FAILURE;
    }
    let mut reader = BufReader::new(&stream);
    loop {
        let response = read_line(&mut reader, MAX_RESPONSE_BYTES)
            .and_then(|line| decode_line::<Response>(&line, MAX_RESPONSE_BYTES));
        let event = match response {
            Ok(Response::Event(event)) => event,
            Ok(other) => return report_unexpected(&other),
            Err(e) => {
                eprintln!("pincer-agent: reading from {where_}: {e}");
                return EXIT_FAILURE;
            }
        };
        match serde_json::to_string(&event) {
            Ok(json) => println!("{json}"),
            Err(e) => eprintln!("pincer-agent: {e}"),
        }
        match event {
            TurnEvent::Done { .. } => return 0,
            TurnEvent::Failed { .. } => return EXIT_FAILURE,
            _ => {}
        }
    }
}

fn report_unexpected(response: &Response) -> i32 {
    eprintln!("pincer-agent: unexpected response: {response:?}");
    EXIT_FAILURE
}
