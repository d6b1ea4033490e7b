//! Errors of the LLM router and their OpenAI- and Anthropic-style bodies.
//!
//! No variant ever carries a provider key: upstream messages are redacted
//! (configured keys and common key formats) before they are stored here, and
//! [`LlmError::to_openai_error`] redacts key formats once more.

use serde_json::{Value, json};

use super::redact::redact_secrets;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The gateway configuration cannot be used (names the deployment).
    #[error("gateway configuration: {0}")]
    Config(String),
    /// The client's request is malformed or uses something we cannot route
    /// or translate.
    #[error("invalid request: {0}")]
    BadRequest(String),
    #[error("unknown model `{alias}` (known: {})", known.join(", "))]
    UnknownModel { alias: String, known: Vec<String> },
    /// A 4xx (other than 429) from the upstream, not retried. `message` is the
    /// upstream's own error message, redacted; never its headers.
    #[error("upstream rejected the request ({status}): {message}")]
    Upstream { status: u16, message: String },
    /// Every deployment of the alias and of its fallbacks failed. Each attempt
    /// reads `alias#index: reason` where reason is an HTTP status (`429`,
    /// `500`), `timeout`, `connection error` or `invalid response`.
    #[error("all deployments failed for `{alias}`: {}", attempts.join(", "))]
    AllFailed {
        alias: String,
        attempts: Vec<String>,
    },
    /// A `local/` model cannot be used (missing, truncated or unsupported
    /// file, …); the message names the file and the fix.
    #[error("{0}")]
    LocalModel(String),
    /// A stream broke after its first chunk had been delivered.
    #[error("stream from {deployment} interrupted: {reason}")]
    StreamInterrupted { deployment: String, reason: String },
}

impl LlmError {
    /// The HTTP status the gateway answers with.
    pub fn status(&self) -> u16 {
        match self {
            LlmError::Config(_) => 500,
            LlmError::BadRequest(_) => 400,
            LlmError::UnknownModel { .. } => 404,
            LlmError::Upstream { status, .. } => *status,
            LlmError::AllFailed { attempts, .. } => {
                let reasons: Vec<&str> = attempts
                    .iter()
                    .map(|a| a.rsplit_once(": ").map_or("", |(_, r)| r))
                    .collect();
                if !reasons.is_empty() && reasons.iter().all(|r| r.starts_with("429")) {
                    429
                } else if !reasons.is_empty() && reasons.iter().all(|r| *r == "timeout") {
                    504
                } else {
                    502
                }
            }
            LlmError::StreamInterrupted { .. } => 502,
            LlmError::LocalModel(_) => 500,
        }
    }

    fn openai_type_and_code(&self) -> (&'static str, &'static str) {
        match self {
            LlmError::Config(_) => ("server_error", "gateway_misconfigured"),
            LlmError::BadRequest(_) => ("invalid_request_error", "invalid_request"),
            LlmError::UnknownModel { .. } => ("invalid_request_error", "model_not_found"),
            LlmError::Upstream { status, .. } => match status {
                401 => ("authentication_error", "upstream_authentication"),
                403 => ("permission_error", "upstream_permission_denied"),
                404 => ("invalid_request_error", "upstream_not_found"),
                413 => ("invalid_request_error", "upstream_request_too_large"),
                _ => ("invalid_request_error", "upstream_bad_request"),
            },
            LlmError::AllFailed { .. } => match self.status() {
                429 => ("rate_limit_error", "rate_limit_exceeded"),
                504 => ("timeout_error", "upstream_timeout"),
                _ => ("server_error", "upstream_unavailable"),
            },
            LlmError::StreamInterrupted { .. } => ("server_error", "stream_interrupted"),
            LlmError::LocalModel(_) => ("server_error", "local_model_unavailable"),
        }
    }

    /// `(status, {"error": {"message", "type", "code"}})`: unknown model 404
    /// `model_not_found`; all deployments failed 502 (`upstream_unavailable`),
    /// 429 when every attempt was rate limited, 504 when every attempt timed
    /// out; an upstream 4xx keeps its status.
    pub fn to_openai_error(&self) -> (u16, Value) {
        let (kind, code) = self.openai_type_and_code();
        let message = redact_secrets(&self.to_string(), &[]);
        (
            self.status(),
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
        )
    }

    /// `(status, {"type": "error", "error": {"type", "message"}})`, the shape
    /// of Anthropic's API, for the gateway's `/v1/messages` endpoint (also the
    /// data of an `event: error` in a stream).
    pub fn to_anthropic_error(&self) -> (u16, Value) {
        let status = self.status();
        let kind = match status {
            400 | 413 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            _ => "api_error",
        };
        let message = redact_secrets(&self.to_string(), &[]);
        (
            status,
            json!({"type": "error", "error": {"type": kind, "message": message}}),
        )
    }
}

sentence_error! {
    /// What an upstream sent that pincer cannot read as the protocol it speaks
    /// (a body that is not the documented JSON, a stream event out of place).
    pub struct Malformed;
}

sentence_error! {
    /// A chat template that does not parse or render.
    pub struct TemplateError;
}
