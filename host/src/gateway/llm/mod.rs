//! The LLM routing core of the gateway (library only; the HTTP server, keys,
//! budgets and the CLI build on it).
//!
//! - One internal shape: OpenAI Chat Completions JSON. [`LlmRouter::chat`]
//!   takes an OpenAI request whose `model` is an alias of
//!   `gateway.model_list`, and answers with an OpenAI `chat.completion` or a
//!   stream of `chat.completion.chunk`s, whatever the provider.
//! - Providers, named litellm-style: `openai/…`, `openai_compatible/…`
//!   (`api_base` required), `ollama/…` (its OpenAI-compatible endpoint) and
//!   `anthropic/…` (Messages API, translated both ways, streamed or not),
//!   and `local/…`, a GGUF model run in this process (see [`local`]).
//! - The gateway's own Anthropic-style endpoint translates with
//!   [`anthropic_request_to_openai`], [`openai_response_to_anthropic`] and
//!   [`openai_stream_to_anthropic`].
//! - Reliability (timeouts, retries, failover, cooldown, routing strategies):
//!   see [`LlmRouter`]. A stream that breaks after its first chunk ends with an
//!   [`LlmError::StreamInterrupted`] item: the client has already seen part
//!   of the answer, so it cannot be replayed invisibly from another deployment.
//! - Provider keys only go into the outgoing `Authorization` / `x-api-key`
//!   header. Errors carry redacted upstream messages only; the server must
//!   pass every upstream body through [`LlmRouter::redact`] (or
//!   [`redact_secrets`]) before it reaches a container.

mod anthropic;
mod balance;
mod error;
pub mod local;
mod openai;
mod provider;
mod redact;
mod router;
mod sse;
mod stream;
mod translate;
mod types;
mod upstream;

#[cfg(test)]
mod tests;

pub use error::{LlmError, Malformed, TemplateError};
pub use router::LlmRouter;
pub use sse::OPENAI_SSE_DONE;
pub use translate::{
    AnthropicEvent, anthropic_request_to_openai, openai_response_to_anthropic,
    openai_stream_to_anthropic,
};
pub use types::{ChatOutcome, Usage};
pub use upstream::UpstreamClient;

/// A client suited to upstream calls: no redirects followed (a redirect must
/// not carry a key elsewhere), a 10 s connect timeout, pooled connections.
/// Installs the process-wide rustls provider if none is.
pub fn default_client() -> Result<reqwest::Client, LlmError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(std::time::Duration::from_secs(10))
        .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| LlmError::Config(format!("cannot build the HTTP client: {e}")))
}

/// Checks one `gateway.model_list` entry as the router will load it
/// (provider, `api_base`, `api_key`), without starting anything; `position`
/// is its index in `model_list` (for the message).
pub fn check_deployment(
    position: usize,
    entry: &crate::config::ModelDeployment,
) -> Result<(), LlmError> {
    provider::Deployment::from_config(position, 0, entry, std::time::Duration::from_secs(60))
        .map(|_| ())
}
