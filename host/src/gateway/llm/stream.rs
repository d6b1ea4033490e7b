//! Streaming from an upstream: bytes → SSE events → OpenAI chunks, with an
//! idle timeout between reads, usage accounting, and the stream handed to the
//! server.
//!
//! The router reads the first chunk itself (so a stream that fails before it
//! can fail over); from then on a failure becomes one `Err` item that ends
//! the stream: what the client has already received cannot be replayed
//! invisibly from another deployment.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use serde_json::Value;
use tokio::sync::oneshot;

use super::anthropic::AnthropicStream;
use super::balance::{DeploymentState, InFlight};
use super::error::LlmError;
use super::openai::{OpenAiStream, StreamStep};
use super::redact::Secrets;
use super::sse::{SseEvent, SseParser};
use super::types::Usage;
use super::upstream::UpstreamResponse;

/// Why a stream failed.
#[derive(Debug)]
pub(crate) enum StreamFailure {
    /// Nothing arrived for the idle timeout.
    Timeout,
    /// The connection broke.
    Connection,
    /// The upstream sent an error event (status as it would have been).
    Upstream { status: u16, message: String },
    /// Unparseable or truncated.
    Invalid(String),
}

impl StreamFailure {
    pub fn describe(&self) -> String {
        match self {
            StreamFailure::Timeout => "idle timeout".into(),
            StreamFailure::Connection => "connection lost".into(),
            StreamFailure::Upstream { status, message } => {
                format!("upstream error {status}: {message}")
            }
            StreamFailure::Invalid(m) => m.clone(),
        }
    }
}

#[derive(Debug)]
enum Dialect {
    OpenAi(OpenAiStream),
    Anthropic(AnthropicStream),
}

/// An upstream SSE response being read.
pub(crate) struct UpstreamStream {
    response: UpstreamResponse,
    parser: SseParser,
    dialect: Dialect,
    pending: VecDeque<Value>,
    idle: Duration,
    prompt_estimate: u32,
    ended: bool,
}

impl UpstreamStream {
    /// `anthropic`: the response speaks Anthropic events. `include_usage`: the
    /// client asked for the final usage chunk.
    pub fn new(
        response: UpstreamResponse,
        anthropic: bool,
        alias: &str,
        include_usage: bool,
        idle: Duration,
        prompt_estimate: u32,
    ) -> Self {
        let dialect = if anthropic {
            Dialect::Anthropic(AnthropicStream::new(alias, include_usage))
        } else {
            Dialect::OpenAi(OpenAiStream::new(alias, include_usage))
        };
        UpstreamStream {
            response,
            parser: SseParser::default(),
            dialect,
            pending: VecDeque::new(),
            idle,
            prompt_estimate,
            ended: false,
        }
    }

    pub fn usage(&self) -> Usage {
        match &self.dialect {
            Dialect::OpenAi(s) => s.usage(self.prompt_estimate),
            Dialect::Anthropic(s) => s.usage(self.prompt_estimate),
        }
    }

    fn handle(&mut self, event: &SseEvent) -> Result<(), StreamFailure> {
        let step = match &mut self.dialect {
            Dialect::OpenAi(s) => {
                let step = s.on_data(&event.data);
                if s.done() {
                    self.ended = true;
                }
                step
            }
            Dialect::Anthropic(s) => {
                let step = s.on_event(event);
                if s.done() {
                    self.ended = true;
                }
                step
            }
        };
        match step.map_err(|e| StreamFailure::Invalid(e.0))? {
            StreamStep::Chunks(chunks) => {
                self.pending.extend(chunks);
                Ok(())
            }
            StreamStep::Error { status, message } => {
                Err(StreamFailure::Upstream { status, message })
            }
        }
    }

    fn complete(&self) -> bool {
        match &self.dialect {
            Dialect::OpenAi(s) => s.complete(),
            Dialect::Anthropic(s) => s.complete(),
        }
    }

    /// The next OpenAI chunk; `Ok(None)` at a clean end.
    pub async fn next_chunk(&mut self) -> Result<Option<Value>, StreamFailure> {
        loop {
            if let Some(chunk) = self.pending.pop_front() {
                return Ok(Some(chunk));
            }
            if self.ended {
                return Ok(None);
            }
            let read = tokio::time::timeout(self.idle, self.response.chunk()).await;
            match read {
                Err(_) => return Err(StreamFailure::Timeout),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "upstream stream read failed");
                    return Err(StreamFailure::Connection);
                }
                Ok(Ok(Some(bytes))) => {
                    let events = self
                        .parser
                        .push(&bytes)
                        .map_err(|e| StreamFailure::Invalid(e.0))?;
                    for event in &events {
                        self.handle(event)?;
                        if self.ended {
                            break;
                        }
                    }
                }
                Ok(Ok(None)) => {
                    if let Some(event) = self.parser.finish() {
                        self.handle(&event)?;
                    }
                    self.ended = true;
                    if !self.complete() {
                        return Err(StreamFailure::Invalid(
                            "the stream ended before it was complete".into(),
                        ));
                    }
                }
            }
        }
    }
}

/// What the live stream needs besides the upstream.
pub(crate) struct LiveContext {
    pub state: Arc<DeploymentState>,
    /// Held until the stream ends or is dropped.
    pub _in_flight: InFlight,
    pub deployment: String,
    pub cooldown: Duration,
    pub secrets: Secrets,
}

struct Live {
    upstream: UpstreamStream,
    first: Option<Value>,
    usage_tx: Option<oneshot::Sender<Usage>>,
    ctx: LiveContext,
    finished: bool,
}

impl Live {
    fn settle(&mut self) {
        if let Some(tx) = self.usage_tx.take() {
            let _ = tx.send(self.upstream.usage());
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Dropped early by the client: report what was used so far.
        self.settle();
    }
}

/// The stream given to the server: `first` (already read by the router),
/// then the rest; a failure becomes one `Err` item and ends it. Usage is sent
/// on `oneshot` when the stream ends or is dropped.
pub(crate) fn live_stream(
    upstream: UpstreamStream,
    first: Value,
    ctx: LiveContext,
) -> (
    BoxStream<'static, Result<Value, LlmError>>,
    oneshot::Receiver<Usage>,
) {
    let (tx, rx) = oneshot::channel();
    let live = Live {
        upstream,
        first: Some(first),
        usage_tx: Some(tx),
        ctx,
        finished: false,
    };
    let events = stream::unfold(live, |mut live| async move {
        if live.finished {
            return None;
        }
        if let Some(first) = live.first.take() {
            return Some((Ok(first), live));
        }
        match live.upstream.next_chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), live)),
            Ok(None) => {
                live.finished = true;
                live.settle();
                None
            }
            Err(failure) => {
                live.finished = true;
                live.ctx.state.cool_down(live.ctx.cooldown);
                let reason = live.ctx.secrets.redact(&failure.describe());
                tracing::warn!(deployment = %live.ctx.deployment, %reason, "stream interrupted");
                live.settle();
                let error = LlmError::StreamInterrupted {
                    deployment: live.ctx.deployment.clone(),
                    reason,
                };
                Some((Err(error), live))
            }
        }
    })
    .boxed();
    (events, rx)
}
