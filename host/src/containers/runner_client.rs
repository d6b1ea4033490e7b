//! Talking to the agent runner inside a workspace container, over the unix
//! socket it listens on in the container's `/run/pincer` (a host folder).

use std::path::Path;
use std::time::Duration;

use pincer_runner_protocol::{Request, Response};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("cannot reach the agent runner at {path}: {source}")]
    Connect {
        path: String,
        source: std::io::Error,
    },
    #[error("the agent runner did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the agent runner closed the connection without answering (did the container stop?)")]
    Closed,
    #[error("talking to the agent runner: {0}")]
    Io(#[from] std::io::Error),
    #[error("the agent runner sent an invalid answer: {0}")]
    Protocol(String),
}

/// Sends one request and waits up to `timeout` for its answer.
pub async fn call(
    socket: &Path,
    request: &Request,
    timeout: Duration,
) -> Result<Response, RunnerError> {
    tokio::time::timeout(timeout, exchange(socket, request))
        .await
        .unwrap_or(Err(RunnerError::Timeout(timeout)))
}

async fn exchange(socket: &Path, request: &Request) -> Result<Response, RunnerError> {
    let (read, _write) = send(socket, request).await?;
    let mut reader = BufReader::new(read).take(pincer_runner_protocol::MAX_RESPONSE_BYTES as u64);
    let mut answer = Vec::new();
    reader.read_until(b'\n', &mut answer).await?;
    if answer.is_empty() {
        return Err(RunnerError::Closed);
    }
    pincer_runner_protocol::decode_line(&answer, pincer_runner_protocol::MAX_RESPONSE_BYTES)
        .map_err(|e| RunnerError::Protocol(e.to_string()))
}

/// Connects and writes one request line; the halves stay open for the
/// answer (closing the write half early would end a turn).
async fn send(
    socket: &Path,
    request: &Request,
) -> Result<
    (
        tokio::net::unix::OwnedReadHalf,
        tokio::net::unix::OwnedWriteHalf,
    ),
    RunnerError,
> {
    let stream = UnixStream::connect(socket)
        .await
        .map_err(|source| RunnerError::Connect {
            path: socket.display().to_string(),
            source,
        })?;
    let (read, mut write) = stream.into_split();
    write
        .write_all(&pincer_runner_protocol::encode_line(request))
        .await?;
    write.flush().await?;
    Ok((read, write))
}

/// Waits until the runner answers a ping (it starts with the container).
pub async fn wait_ready(
    socket: &Path,
    within: Duration,
) -> Result<pincer_runner_protocol::Status, RunnerError> {
    let started = tokio::time::Instant::now();
    loop {
        match call(socket, &Request::Ping, Duration::from_secs(2)).await {
            Ok(Response::Pong(status)) => return Ok(status),
            Ok(other) => {
                return Err(RunnerError::Protocol(format!(
                    "expected a pong, got {other:?}"
                )));
            }
            Err(e) if started.elapsed() >= within => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// The event stream of one turn running in the container.
pub struct TurnStream {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    // Kept open for the whole turn: dropping it tells the runner to stop.
    _write: tokio::net::unix::OwnedWriteHalf,
    finished: bool,
    received: u64,
}

/// Starts a turn; read its events with [`TurnStream::next`].
pub async fn turn(
    socket: &Path,
    request: pincer_runner_protocol::TurnRequest,
) -> Result<TurnStream, RunnerError> {
    let (read, write) = send(socket, &Request::Turn(request)).await?;
    Ok(TurnStream {
        reader: BufReader::new(read),
        _write: write,
        finished: false,
        received: 0,
    })
}

impl TurnStream {
    /// Bytes read from the runner so far.
    pub fn received_bytes(&self) -> u64 {
        self.received
    }

    /// The next event; `Ok(None)` after the terminal event. A connection
    /// that ends before the terminal event is [`RunnerError::Closed`].
    pub async fn next(&mut self) -> Result<Option<pincer_runner_protocol::TurnEvent>, RunnerError> {
        if self.finished {
            return Ok(None);
        }
        let max = pincer_runner_protocol::MAX_RESPONSE_BYTES;
        let mut line = Vec::new();
        (&mut self.reader)
            .take(max as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if line.is_empty() {
            self.finished = true;
            return Err(RunnerError::Closed);
        }
        self.received += line.len() as u64;
        let event = match pincer_runner_protocol::decode_line::<Response>(&line, max) {
            Ok(Response::Event(event)) => event,
            Ok(Response::Error { kind, message }) => pincer_runner_protocol::TurnEvent::Failed {
                kind: match kind {
                    pincer_runner_protocol::ErrorKind::BadRequest => {
                        pincer_runner_protocol::TurnErrorKind::BadRequest
                    }
                    _ => pincer_runner_protocol::TurnErrorKind::Internal,
                },
                message,
            },
            Ok(other) => {
                self.finished = true;
                return Err(RunnerError::Protocol(format!(
                    "expected a turn event, got {other:?}"
                )));
            }
            Err(e) => {
                self.finished = true;
                return Err(RunnerError::Protocol(e.to_string()));
            }
        };
        self.finished = event.is_terminal();
        Ok(Some(event))
    }
}
