//! [`LlmRouter`]: picks a deployment for an alias, calls it, and on failure
//! retries, fails over and cools deployments down.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use serde_json::Value;

use super::anthropic;
use super::balance::{DeploymentState, InFlight, backoff, choose};
use super::error::LlmError;
use super::local::{LocalError, LocalOutcome, LocalRuntime, LocalSettings, ModelSpec};
use super::openai::{self, ChatRequest, parse_chat_request, upstream_error_message};
use super::provider::{Deployment, Target, seconds};
use super::redact::Secrets;
use super::stream::{LiveContext, StreamFailure, UpstreamStream, live_stream};
use super::types::ChatOutcome;
use super::upstream::{UpstreamClient, UpstreamResponse};
use crate::config::{Gateway, RoutingStrategy};

/// How long a failed deployment is skipped when the upstream gives no
/// `Retry-After`.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(30);
/// An upstream's `Retry-After` is honoured up to this.
pub const MAX_COOLDOWN: Duration = Duration::from_secs(300);
pub const BACKOFF_BASE: Duration = Duration::from_millis(100);
pub const BACKOFF_CAP: Duration = Duration::from_secs(2);
/// A non-streamed answer larger than this is refused.
const MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;
/// Of an error body, at most this much is read.
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// Why one attempt failed.
#[derive(Debug)]
enum Failure {
    /// 429: fail over at once.
    RateLimited { retry_after: Option<Duration> },
    /// No headers (or first chunk, or body) within the timeout; 408: fail
    /// over at once.
    Timeout,
    /// 5xx (or another unexpected status): retry with backoff.
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// Connection refused, reset, …: retry with backoff.
    Connection,
    /// A 2xx we cannot use: retry with backoff.
    Invalid(String),
    /// A 4xx other than 408/429, or a request we cannot translate: returned
    /// to the client as is.
    Fatal(LlmError),
    /// A local model's queue is full: fail over at once, like a 429.
    Busy,
}

impl Failure {
    fn label(&self) -> String {
        match self {
            Failure::RateLimited { .. } => "429".into(),
            Failure::Timeout => "timeout".into(),
            Failure::Status { status, .. } => status.to_string(),
            Failure::Connection => "connection error".into(),
            Failure::Invalid(_) => "invalid response".into(),
            Failure::Fatal(e) => e.status().to_string(),
            Failure::Busy => "429 (local model busy, queue full)".into(),
        }
    }

    /// Fail over without retrying (429, timeout).
    fn fails_over(&self) -> bool {
        matches!(
            self,
            Failure::RateLimited { .. } | Failure::Timeout | Failure::Busy
        )
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Failure::RateLimited { retry_after } | Failure::Status { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }

    fn from_stream(failure: StreamFailure, secrets: &Secrets) -> Failure {
        match failure {
            StreamFailure::Timeout => Failure::Timeout,
            StreamFailure::Connection => Failure::Connection,
            StreamFailure::Invalid(m) => Failure::Invalid(m),
            StreamFailure::Upstream { status: 429, .. } => {
                Failure::RateLimited { retry_after: None }
            }
            StreamFailure::Upstream { status, message } if (400..500).contains(&status) => {
                Failure::Fatal(LlmError::Upstream {
                    status,
                    message: secrets.redact(&message),
                })
            }
            StreamFailure::Upstream { status, .. } => Failure::Status {
                status,
                retry_after: None,
            },
        }
    }
}

/// Everything tried during one `chat` call.
struct Run {
    attempted: Vec<bool>,
    attempts: Vec<String>,
}

/// Routes OpenAI-shaped chat requests to the deployments of `gateway.model_list`.
///
/// For a request naming alias `A`, the candidates are the deployments of `A`,
/// then those of `A`'s fallbacks, depth first and in order (a fallback's own
/// fallbacks come before the next fallback of `A`), each alias once (cycles
/// are cut). Within an alias the routing strategy chooses. Deployments in
/// cooldown are skipped while any other candidate is left, and tried last.
///
/// - 429 or timeout: the deployment cools down and the next deployment of
///   the alias is tried at once, then the fallbacks.
/// - 5xx, connection error or an unusable 2xx: the deployment cools down and,
///   up to `num_retries` times per alias, the call is retried after a
///   jittered exponential backoff (100 ms base, 2 s cap) on another
///   deployment of the alias, or the same one when it is the only one; then
///   the fallbacks.
/// - Other 4xx: returned at once as [`LlmError::Upstream`].
/// - A stream counts as answered once its first chunk arrived; failures
///   before that are handled as above, failures after it end the stream with
///   an error item.
pub struct LlmRouter {
    client: UpstreamClient,
    states: Vec<Arc<DeploymentState>>,
    by_alias: BTreeMap<String, Vec<usize>>,
    fallbacks: BTreeMap<String, Vec<String>>,
    strategy: RoutingStrategy,
    num_retries: u32,
    cooldown: Duration,
    backoff_base: Duration,
    backoff_cap: Duration,
    secrets: Secrets,
    local: Arc<LocalRuntime>,
}

impl fmt::Debug for LlmRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let deployments: Vec<String> = self
            .states
            .iter()
            .map(|s| s.deployment.id.to_string())
            .collect();
        f.debug_struct("LlmRouter")
            .field("deployments", &deployments)
            .field("fallbacks", &self.fallbacks)
            .field("strategy", &self.strategy)
            .field("num_retries", &self.num_retries)
            .field("cooldown", &self.cooldown)
            .finish_non_exhaustive()
    }
}

impl LlmRouter {
    /// Checks every deployment (provider prefix, `api_base`, `timeout`) and
    /// the fallbacks; errors name the offending entry.
    pub fn new(config: &Gateway, client: UpstreamClient) -> Result<Self, LlmError> {
        let default_timeout = seconds(config.timeout).ok_or_else(|| {
            LlmError::Config("gateway.timeout must be a positive number of seconds".into())
        })?;
        let mut states = Vec::new();
        let mut by_alias: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (position, entry) in config.model_list.iter().enumerate() {
            let members = by_alias.entry(entry.model_name.clone()).or_default();
            let deployment =
                Deployment::from_config(position, members.len(), entry, default_timeout)?;
            members.push(states.len());
            states.push(Arc::new(DeploymentState::new(deployment)));
        }
        let mut fallbacks: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, map) in config.fallbacks.iter().enumerate() {
            for (alias, targets) in map {
                for name in std::iter::once(alias).chain(targets) {
                    if !by_alias.contains_key(name) {
                        return Err(LlmError::Config(format!(
                            "gateway.fallbacks[{i}]: `{name}` is not a model_name of gateway.model_list"
                        )));
                    }
                }
                fallbacks
                    .entry(alias.clone())
                    .or_default()
                    .extend(targets.iter().cloned());
            }
        }
        let secrets = states
            .iter()
            .filter_map(|s: &Arc<DeploymentState>| s.deployment.api_key().map(str::to_owned))
            .collect();
        Ok(LlmRouter {
            client,
            states,
            by_alias,
            fallbacks,
            strategy: config.routing_strategy,
            num_retries: config.num_retries,
            cooldown: DEFAULT_COOLDOWN,
            backoff_base: BACKOFF_BASE,
            backoff_cap: BACKOFF_CAP,
            secrets: Secrets::new(secrets),
            local: Arc::new(LocalRuntime::new(LocalSettings::default())),
        })
    }

    /// Settings of `local/` deployments (models folder, concurrency, queue,
    /// threads); the default looks in `$PINCER_HOME/models` and runs one
    /// generation at a time with a queue of 4.
    pub fn with_local(mut self, settings: LocalSettings) -> Self {
        self.local = Arc::new(LocalRuntime::new(settings));
        self
    }

    /// Cooldown of a failed deployment when the upstream sends no
    /// `Retry-After` (default 30 s).
    #[cfg(test)]
    pub fn with_cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// Retry backoff base and cap (default 100 ms and 2 s).
    #[cfg(test)]
    pub fn with_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_cap = cap;
        self
    }

    /// Whether `alias` is a configured model alias.
    pub fn serves(&self, alias: &str) -> bool {
        self.by_alias.contains_key(alias)
    }

    /// The embedding model `alias` names (a `local/` deployment of a known
    /// embedding model), if it names one.
    pub fn embedding_model(&self, alias: &str) -> Option<super::local::fetch::KnownModel> {
        self.by_alias
            .get(alias)?
            .iter()
            .find_map(|&i| match &self.states[i].deployment.target {
                super::provider::Target::Local(super::local::ModelSpec::Named(name)) => {
                    super::local::fetch::known(name)
                        .filter(|m| m.kind == super::local::fetch::ModelKind::Embedding)
                }
                _ => None,
            })
    }

    /// The configured aliases (`model_name`s), sorted.
    pub fn aliases(&self) -> Vec<String> {
        self.by_alias.keys().cloned().collect()
    }

    /// Every deployment, in config order.
    #[cfg(test)]
    pub fn deployments(&self) -> Vec<super::types::DeploymentId> {
        self.states
            .iter()
            .map(|s| s.deployment.id.clone())
            .collect()
    }

    /// The aliases tried for `alias`, in order: itself, then its fallbacks
    /// depth first, each once.
    pub fn fallback_chain(&self, alias: &str) -> Vec<String> {
        let mut chain = Vec::new();
        let mut stack = vec![alias.to_owned()];
        while let Some(next) = stack.pop() {
            if chain.contains(&next) {
                continue;
            }
            if let Some(targets) = self.fallbacks.get(&next) {
                stack.extend(targets.iter().rev().cloned());
            }
            chain.push(next);
        }
        chain
    }

    /// Redacts the configured provider keys and common key formats (see
    /// [`super::redact_secrets`]). Apply to every upstream body before it
    /// reaches a container.
    pub fn redact(&self, text: &str) -> String {
        self.secrets.redact(text)
    }

    /// [`Self::redact`] of a string the caller gives up, returned as it is
    /// when there is nothing to redact.
    pub fn redact_owned(&self, text: String) -> String {
        self.secrets.redact_owned(text)
    }

    /// The redacted text, or `None` when `text` holds nothing to redact.
    pub fn redacted(&self, text: &str) -> Option<String> {
        self.secrets.redacted(text)
    }

    /// Routes one OpenAI-shaped chat request; `model` is an alias.
    pub async fn chat(&self, request: Value) -> Result<ChatOutcome, LlmError> {
        let request = parse_chat_request(request)?;
        if !self.by_alias.contains_key(&request.alias) {
            return Err(LlmError::UnknownModel {
                alias: request.alias,
                known: self.aliases(),
            });
        }
        let chain = self.fallback_chain(&request.alias);
        let mut run = Run {
            attempted: vec![false; self.states.len()],
            attempts: Vec::new(),
        };
        // First everything not cooling down, then what was.
        for cooling in [false, true] {
            for alias in &chain {
                if let Some(result) = self.try_alias(alias, &request, cooling, &mut run).await {
                    return result;
                }
            }
        }
        Err(LlmError::AllFailed {
            alias: request.alias,
            attempts: run.attempts,
        })
    }

    /// Tries the deployments of one alias (those cooling down or not, as
    /// `cooling` says). `None`: nothing answered, go on.
    async fn try_alias(
        &self,
        alias: &str,
        request: &ChatRequest,
        cooling: bool,
        run: &mut Run,
    ) -> Option<Result<ChatOutcome, LlmError>> {
        let members = self.by_alias.get(alias)?;
        let mut retries = 0;
        let mut retry_target = None;
        loop {
            let now = Instant::now();
            let fresh: Vec<usize> = members
                .iter()
                .copied()
                .filter(|i| !run.attempted[*i] && self.states[*i].is_cooling(now) == cooling)
                .collect();
            let pick = if fresh.is_empty() {
                retry_target?
            } else {
                choose(self.strategy, &self.states, &fresh)?
            };
            run.attempted[pick] = true;
            let state = &self.states[pick];
            let failure = match self.attempt(state, request).await {
                Ok(outcome) => return Some(Ok(outcome)),
                Err(Failure::Fatal(e)) => return Some(Err(e)),
                Err(failure) => failure,
            };
            let id = &state.deployment.id;
            let label = failure.label();
            if let Failure::Invalid(detail) = &failure {
                tracing::warn!(deployment = %id, detail = %self.redact(detail), "unusable upstream answer");
            } else {
                tracing::warn!(deployment = %id, failure = %label, "upstream call failed");
            }
            run.attempts.push(format!("{}: {label}", id.short()));
            let cooldown = failure
                .retry_after()
                .unwrap_or(self.cooldown)
                .min(MAX_COOLDOWN);
            state.cool_down(cooldown);
            if failure.fails_over() {
                retry_target = None;
                continue;
            }
            if retries >= self.num_retries {
                return None;
            }
            retries += 1;
            tokio::time::sleep(backoff(retries, self.backoff_base, self.backoff_cap)).await;
            retry_target = Some(pick);
        }
    }

    /// One call to one deployment.
    async fn attempt(
        &self,
        state: &Arc<DeploymentState>,
        request: &ChatRequest,
    ) -> Result<ChatOutcome, Failure> {
        let deployment = &state.deployment;
        let url = match &deployment.target {
            Target::Http(url) => url,
            Target::Local(spec) => return self.attempt_local(state, spec, request).await,
        };
        let openai_style = deployment.provider.is_openai_style();
        let body = if openai_style {
            openai::upstream_body(request, &deployment.upstream_model, deployment.provider)
        } else {
            anthropic::request_from_openai(request, &deployment.upstream_model)
                .map_err(Failure::Fatal)?
                .to_string()
                .into_bytes()
        };
        let in_flight = InFlight::new(state);
        let started = Instant::now();
        let send = self
            .client
            .post(url, deployment.request_headers(), bytes::Bytes::from(body));
        let response = match tokio::time::timeout(deployment.timeout, send).await {
            Err(_) => return Err(Failure::Timeout),
            Ok(Err(e)) => {
                let error = self.redact(&e.to_string());
                tracing::debug!(deployment = %deployment.id, %error, "upstream request failed");
                return Err(if e.timed_out {
                    Failure::Timeout
                } else {
                    Failure::Connection
                });
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status.as_u16();
        if !(200..300).contains(&status) {
            return Err(self
                .failure_from_status(status, response, deployment.timeout)
                .await);
        }
        if request.stream {
            let mut upstream = UpstreamStream::new(
                response,
                !openai_style,
                &request.alias,
                request.include_usage,
                deployment.timeout,
                request.prompt_estimate,
            );
            let first = match upstream.next_chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => {
                    return Err(Failure::Invalid(
                        "the stream ended before its first chunk".into(),
                    ));
                }
                Err(failure) => return Err(Failure::from_stream(failure, &self.secrets)),
            };
            state.record_latency(started.elapsed());
            let context = LiveContext {
                state: Arc::clone(state),
                _in_flight: in_flight,
                deployment: deployment.id.to_string(),
                cooldown: self.cooldown,
                secrets: self.secrets.clone(),
            };
            let (events, usage) = live_stream(upstream, first, context);
            return Ok(ChatOutcome::Stream {
                events,
                deployment: deployment.id.clone(),
                usage,
            });
        }
        let bytes =
            match tokio::time::timeout(deployment.timeout, read_body(response, MAX_RESPONSE_BYTES))
                .await
            {
                Err(_) => return Err(Failure::Timeout),
                Ok(Err(())) => return Err(Failure::Connection),
                Ok(Ok((_, true))) => {
                    return Err(Failure::Invalid("the response is too large".into()));
                }
                Ok(Ok((bytes, false))) => bytes,
            };
        let json: Value = serde_json::from_slice(&bytes)
            .map_err(|_| Failure::Invalid("the response is not JSON".into()))?;
        let translated = if openai_style {
            openai::finish_response(json, &request.alias, request.prompt_estimate)
        } else {
            anthropic::response_to_openai(&json, &request.alias, request.prompt_estimate)
        };
        let (response, usage) = translated.map_err(|e| Failure::Invalid(e.0))?;
        state.record_latency(started.elapsed());
        drop(in_flight);
        Ok(ChatOutcome::Complete {
            response,
            usage,
            deployment: deployment.id.clone(),
        })
    }

    /// One call to a model run in this process.
    async fn attempt_local(
        &self,
        state: &Arc<DeploymentState>,
        spec: &ModelSpec,
        request: &ChatRequest,
    ) -> Result<ChatOutcome, Failure> {
        let in_flight = InFlight::new(state);
        let started = Instant::now();
        let outcome = self
            .local
            .chat(
                spec,
                &request.body,
                &request.alias,
                request.stream,
                request.include_usage,
            )
            .await
            .map_err(|e| match e {
                LocalError::Busy { .. } => Failure::Busy,
                LocalError::BadRequest(message) => Failure::Fatal(LlmError::BadRequest(message)),
                other => Failure::Fatal(LlmError::LocalModel(other.to_string())),
            })?;
        let deployment = state.deployment.id.clone();
        match outcome {
            LocalOutcome::Complete { response, usage } => {
                state.record_latency(started.elapsed());
                Ok(ChatOutcome::Complete {
                    response,
                    usage,
                    deployment,
                })
            }
            LocalOutcome::Stream { events, usage } => {
                state.record_latency(started.elapsed());
                let events = futures_util::StreamExt::map(events, move |chunk| {
                    // Counted in flight until the stream ends or is dropped.
                    let _ = &in_flight;
                    Ok(chunk)
                });
                Ok(ChatOutcome::Stream {
                    events: Box::pin(events),
                    deployment,
                    usage,
                })
            }
        }
    }

    async fn failure_from_status(
        &self,
        status: u16,
        response: UpstreamResponse,
        timeout: Duration,
    ) -> Failure {
        let retry_after = retry_after(&response.headers);
        match status {
            429 => return Failure::RateLimited { retry_after },
            408 => return Failure::Timeout,
            400..=499 => {}
            _ => {
                return Failure::Status {
                    status,
                    retry_after,
                };
            }
        }
        let body = match tokio::time::timeout(timeout, read_body(response, MAX_ERROR_BYTES)).await {
            Ok(Ok((bytes, _))) => String::from_utf8_lossy(&bytes).into_owned(),
            _ => String::new(),
        };
        Failure::Fatal(LlmError::Upstream {
            status,
            message: self.redact(&upstream_error_message(&body)),
        })
    }
}

/// Reads at most `limit` bytes: `(bytes, truncated)`; `Err` if the
/// connection broke.
async fn read_body(mut response: UpstreamResponse, limit: usize) -> Result<(Vec<u8>, bool), ()> {
    let mut buf = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|_| ())? {
        let room = limit - buf.len();
        if chunk.len() > room {
            buf.extend_from_slice(&chunk[..room]);
            return Ok((buf, true));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((buf, false))
}

/// `retry-after-ms`, or `retry-after` in seconds (an HTTP date is ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let secs = header("retry-after").and_then(|v| v.trim().parse::<f64>().ok())?;
    Duration::try_from_secs_f64(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h), None);
    }
}
