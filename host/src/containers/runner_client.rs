//! Talking to the agent runner inside a workspace container, over the unix
//! socket it listens on in the container's `/run/pincer/runner` (a host
//! folder the container owns, so never trusted by name): the socket is
//! resolved beneath the folder's handle without following symlinks,
//! connected through that handle, and its peer must be a process of the
//! workspace's own container (see [`super::beneath`]).

use std::path::{Path, PathBuf};
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
    #[error("refusing the runner socket: {0}")]
    Boundary(#[from] super::beneath::BeneathError),
    #[error(
        "the process listening on {path} is not in the workspace's container ({detail}); it is not trusted"
    )]
    Untrusted { path: String, detail: String },
}

/// File name of the runner's socket in its folder.
pub const SOCKET_NAME: &str = "runner.sock";

/// Where the host reaches one container's runner: the runner folder on the
/// host (`$PINCER_HOME/run/<ws>/runner`) and the container (Docker's full
/// id) whose process must be listening there.
#[derive(Debug, Clone)]
pub struct RunnerAddr {
    pub dir: PathBuf,
    pub container_id: String,
}

impl RunnerAddr {
    fn display(&self) -> PathBuf {
        self.dir.join(SOCKET_NAME)
    }

    /// Connects to the runner without following any name the container
    /// controls, and checks that the peer is in the container.
    pub async fn connect(&self) -> Result<UnixStream, RunnerError> {
        let shown = self.display();
        let dir = super::beneath::open_dir(&self.dir)?;
        let handle = {
            use std::os::fd::AsFd;
            super::beneath::open_socket_beneath(dir.as_fd(), Path::new(SOCKET_NAME), &shown)?
        };
        let stream = UnixStream::connect(super::beneath::fd_path(&handle))
            .await
            .map_err(|source| RunnerError::Connect {
                path: shown.display().to_string(),
                source,
            })?;
        drop(handle);
        let pid = stream
            .peer_cred()
            .map_err(|source| RunnerError::Connect {
                path: shown.display().to_string(),
                source,
            })?
            .pid()
            .unwrap_or(0);
        if !super::beneath::pid_in_container(pid, &self.container_id) {
            return Err(RunnerError::Untrusted {
                path: shown.display().to_string(),
                detail: if pid <= 0 {
                    "its process id is not visible to pincer".to_string()
                } else {
                    let short = self.container_id.get(..12).unwrap_or(&self.container_id);
                    format!("process {pid} is not in the cgroup of container {short}")
                },
            });
        }
        Ok(stream)
    }
}

/// Sends one request and waits up to `timeout` for its answer.
pub async fn call(
    socket: &RunnerAddr,
    request: &Request,
    timeout: Duration,
) -> Result<Response, RunnerError> {
    tokio::time::timeout(timeout, exchange(socket, request))
        .await
        .unwrap_or(Err(RunnerError::Timeout(timeout)))
}

async fn exchange(socket: &RunnerAddr, request: &Request) -> Result<Response, RunnerError> {
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
    socket: &RunnerAddr,
    request: &Request,
) -> Result<
    (
        tokio::net::unix::OwnedReadHalf,
        tokio::net::unix::OwnedWriteHalf,
    ),
    RunnerError,
> {
    let stream = socket.connect().await?;
    let (read, mut write) = stream.into_split();
    write
        .write_all(&pincer_runner_protocol::encode_line(request))
        .await?;
    write.flush().await?;
    Ok((read, write))
}

/// Waits until the runner answers a ping (it starts with the container).
pub async fn wait_ready(
    socket: &RunnerAddr,
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
            // A socket bound by a process outside the container is no
            // start-up delay: refuse at once.
            Err(e @ RunnerError::Untrusted { .. }) => return Err(e),
            Err(e) if started.elapsed() >= within => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// The event stream of one turn running in the container.
pub struct TurnStream {
    reader: BufReader<tokio::net::unix::OwnedReadHalf>,
    // Kept open for the whole turn: dropping it tells the runner to stop.
    write: tokio::net::unix::OwnedWriteHalf,
    finished: bool,
    received: u64,
}

/// Starts a turn; read its events with [`TurnStream::next`].
pub async fn turn(
    socket: &RunnerAddr,
    request: pincer_runner_protocol::TurnRequest,
) -> Result<TurnStream, RunnerError> {
    let (read, write) = send(socket, &Request::Turn(request)).await?;
    Ok(TurnStream {
        reader: BufReader::new(read),
        write,
        finished: false,
        received: 0,
    })
}

impl TurnStream {
    /// Answers the runner's `Check` event.
    pub async fn answer(
        &mut self,
        verdict: &pincer_runner_protocol::Verdict,
    ) -> Result<(), RunnerError> {
        self.write
            .write_all(&pincer_runner_protocol::encode_line(verdict))
            .await?;
        self.write.flush().await?;
        Ok(())
    }

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
