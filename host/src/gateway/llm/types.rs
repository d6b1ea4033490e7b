//! The small public value types the router hands back.

use std::fmt;

use futures_util::stream::BoxStream;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use super::error::LlmError;

/// Token counts of one call. Taken from the upstream's `usage` when it sends
/// one, otherwise estimated (about four characters per token).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
}

impl Usage {
    pub fn total_tokens(&self) -> u32 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// Which deployment answered: its alias (`model_name`), its position among the
/// deployments of that alias (0-based, in config order) and its
/// provider-qualified model. Displays as `default#0 (openai/gpt-4o-mini)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DeploymentId {
    pub alias: String,
    pub index: usize,
    pub model: String,
}

impl DeploymentId {
    /// `alias#index`, the short form used in attempt lists.
    pub fn short(&self) -> String {
        format!("{}#{}", self.alias, self.index)
    }
}

impl fmt::Display for DeploymentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{} ({})", self.alias, self.index, self.model)
    }
}

/// The result of [`super::LlmRouter::chat`].
pub enum ChatOutcome {
    /// A whole `chat.completion` (OpenAI shape, `model` set to the requested
    /// alias).
    Complete {
        response: Value,
        usage: Usage,
        deployment: DeploymentId,
    },
    /// `chat.completion.chunk` objects (OpenAI shape, `model` set to the
    /// requested alias), without the final `[DONE]` marker: the server writes
    /// each as `data: {chunk}` and ends with `data: [DONE]` (see
    /// [`super::openai_sse_data`]). A stream that breaks after its first chunk
    /// ends with one `Err` item ([`LlmError::StreamInterrupted`]); it is not
    /// replayed elsewhere because the client has already seen part of it.
    /// `usage` resolves when the stream ends or is dropped.
    Stream {
        events: BoxStream<'static, Result<Value, LlmError>>,
        deployment: DeploymentId,
        usage: oneshot::Receiver<Usage>,
    },
}

impl fmt::Debug for ChatOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChatOutcome::Complete {
                usage, deployment, ..
            } => f
                .debug_struct("Complete")
                .field("deployment", &deployment.to_string())
                .field("usage", usage)
                .finish_non_exhaustive(),
            ChatOutcome::Stream { deployment, .. } => f
                .debug_struct("Stream")
                .field("deployment", &deployment.to_string())
                .finish_non_exhaustive(),
        }
    }
}
