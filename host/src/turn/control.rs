//! The daemon's control socket (`$PINCER_HOME/run/pincer.sock`, mode 0600):
//! `pincer message` and `pincer chat` hand their turns to a running
//! `pincer start` through it instead of bringing up their own gateway.
//! One connection carries one turn: a JSON request line, then JSON reply
//! lines (the turn's events, then its summary). Closing the connection
//! cancels the turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::{Agent, AgentEvent, Inbound, TurnSummary};
use crate::sessions::SessionKey;

/// Largest request line accepted.
const MAX_REQUEST_BYTES: u64 = 256 * 1024;

pub fn socket_path(home: &Path) -> PathBuf {
    home.join("run").join("pincer.sock")
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlRequest {
    pub channel: String,
    pub conversation: String,
    pub workspace: String,
    pub text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlReply {
    Event {
        event: AgentEvent,
    },
    Summary {
        summary: TurnSummary,
    },
    /// The turn could not start.
    Error {
        message: String,
    },
}

/// Binds the control socket (replacing a stale one; refusing when another
/// daemon answers on it).
pub fn bind(home: &Path) -> anyhow::Result<UnixListener> {
    use anyhow::Context as _;
    let path = socket_path(home);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if std::os::unix::net::UnixStream::connect(&path).is_ok() {
        anyhow::bail!(
            "another pincer daemon is already running for {} (its control socket {} answers)",
            home.display(),
            path.display()
        );
    }
    let _ = std::fs::remove_file(&path);
    let listener =
        UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(
        &path,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o600),
    )?;
    Ok(listener)
}

/// Serves turns on `listener` until the task is dropped: turns of the
/// workspaces `cluster` says this daemon runs (another daemon of the
/// cluster runs the others, in its own container).
pub async fn serve(
    listener: UnixListener,
    agent: Arc<Agent>,
    cluster: Arc<dyn crate::cluster::Membership>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let (agent, cluster) = (agent.clone(), cluster.clone());
        tokio::spawn(async move {
            if let Err(e) = handle(stream, &agent, cluster.as_ref()).await {
                tracing::debug!("control connection: {e}");
            }
        });
    }
}

async fn handle(
    stream: UnixStream,
    agent: &Agent,
    cluster: &dyn crate::cluster::Membership,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    (&mut reader)
        .take(MAX_REQUEST_BYTES)
        .read_until(b'\n', &mut line)
        .await?;
    let request: ControlRequest = match serde_json::from_slice(&line) {
        Ok(request) => request,
        Err(e) => {
            let reply = ControlReply::Error {
                message: format!("invalid control request: {e}"),
            };
            return write_reply(&mut write, &reply).await;
        }
    };
    tracing::info!(
        workspace = %request.workspace,
        channel = %request.channel,
        "turn requested on the control socket"
    );
    if agent.has_workspace(&request.workspace) && !cluster.holds(&request.workspace) {
        let reply = ControlReply::Error {
            message: format!(
                "workspace `{}` runs on another pincer daemon of this cluster now, in its \
                 container (`pincer status` shows which): send the message through that \
                 daemon's home",
                request.workspace
            ),
        };
        return write_reply(&mut write, &reply).await;
    }
    // Events are written by a task of their own so a slow client never
    // blocks the turn's bookkeeping.
    let (tx, mut rx) = mpsc::unbounded_channel::<ControlReply>();
    let writer = tokio::spawn(async move {
        while let Some(reply) = rx.recv().await {
            if write_reply(&mut write, &reply).await.is_err() {
                break;
            }
        }
    });
    // The client closing its end cancels the turn.
    let hung_up = async move {
        let mut rest = [0u8; 64];
        while matches!(reader.read(&mut rest).await, Ok(n) if n > 0) {}
    };
    let events = tx.clone();
    let inbound = Inbound {
        key: SessionKey {
            channel: request.channel,
            conversation: request.conversation,
            workspace: request.workspace,
        },
        text: request.text,
        origin: None,
        presence: crate::turn::Presence::Person,
        quoted: None,
        images: Vec::new(),
    };
    let reply = match agent
        .turn(
            inbound,
            &move |event| {
                let _ = events.send(ControlReply::Event { event });
            },
            hung_up,
        )
        .await
    {
        Ok(summary) => ControlReply::Summary { summary },
        Err(e) => ControlReply::Error {
            message: e.to_string(),
        },
    };
    let _ = tx.send(reply);
    drop(tx);
    let _ = writer.await;
    Ok(())
}

async fn write_reply(
    write: &mut tokio::net::unix::OwnedWriteHalf,
    reply: &ControlReply,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    write.flush().await
}

/// A daemon's control socket, when one answers.
pub async fn connect(home: &Path) -> Option<UnixStream> {
    UnixStream::connect(socket_path(home)).await.ok()
}

/// Sends one turn to the daemon; calls `on_event` per event and returns the
/// summary, or the daemon's reason the turn could not start.
pub async fn remote_turn(
    stream: UnixStream,
    request: &ControlRequest,
    on_event: &(dyn Fn(AgentEvent) + Send + Sync),
) -> anyhow::Result<TurnSummary> {
    let (read, mut write) = stream.into_split();
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    write.write_all(&line).await?;
    write.flush().await?;
    let mut lines = BufReader::new(read).lines();
    while let Some(line) = lines.next_line().await? {
        match serde_json::from_str::<ControlReply>(&line)? {
            ControlReply::Event { event } => on_event(event),
            ControlReply::Summary { summary } => return Ok(summary),
            ControlReply::Error { message } => anyhow::bail!("{message}"),
        }
    }
    anyhow::bail!("the pincer daemon closed the connection before the turn ended")
}
