//! The gateway's HTTP face: OpenAI-compatible `/v1/chat/completions` and
//! `/v1/models`, Anthropic-style `/v1/messages`, on TCP and on one unix
//! socket per workspace. Every call is authenticated by a pincer key, checked
//! against the workspace's budget (reserved before dispatch, settled after),
//! optionally answered from the cache, routed, recorded and redacted.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};

use super::budget::{Estimate, Ledger, Usage as SpentUsage};
use super::cache::ResponseCache;
use super::cost::PriceTable;
use super::keys::{KeyInfo, KeyStore};
use super::llm::{self, ChatOutcome, LlmError, LlmRouter};
use super::metrics::{Metrics, Outcome};
use crate::audit::AuditLog;
use crate::config::{Budget, Config};
use crate::policy::{Reaches, WorkspaceReach};

pub const DEPLOYMENT_HEADER: &str = "x-pincer-deployment";
pub const CACHE_HEADER: &str = "x-pincer-cache";
/// The `model` label of requests for a model that is not configured.
pub const UNKNOWN_MODEL_LABEL: &str = "(unknown)";

/// Everything a gateway request needs; shared by every listener.
pub struct Gateway {
    router: LlmRouter,
    embeddings: super::embeddings::Embeddings,
    keys: Arc<KeyStore>,
    ledger: Arc<Ledger>,
    approvals: Arc<crate::approvals::Approvals>,
    prices: PriceTable,
    cache: Option<ResponseCache>,
    budgets: BTreeMap<String, Budget>,
    max_request_bytes: usize,
    /// What each configured workspace may reach, computed once here and
    /// shared with the MCP gateway; `pincer policy audit` prints the same.
    reaches: Arc<Reaches>,
    mcp: Arc<super::mcp::McpGateway>,
    metrics: Arc<Metrics>,
    /// Timeouts and caps of the TCP listener and the workspace sockets.
    limits: crate::config::GatewayLimits,
    /// The bearer key `/metrics` requires (`gateway.metrics_key`).
    metrics_key: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    OpenAi,
    Anthropic,
}

/// An error answered in the dialect of the endpoint that was called.
struct ApiError {
    status: u16,
    message: String,
    code: &'static str,
}

impl ApiError {
    fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    fn respond(self, dialect: Dialect) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_GATEWAY);
        let body = match dialect {
            Dialect::OpenAi => {
                json!({"error": {"message": self.message, "type": error_type(self.status), "code": self.code}})
            }
            Dialect::Anthropic => {
                json!({"type": "error", "error": {"type": self.code, "message": self.message}})
            }
        };
        (status, axum::Json(body)).into_response()
    }
}

fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 | 408 | 400 => "invalid_request_error",
        429 => "rate_limit_error",
        _ => "api_error",
    }
}

fn llm_error(e: &LlmError, dialect: Dialect) -> Response {
    let (status, body) = match dialect {
        Dialect::OpenAi => e.to_openai_error(),
        Dialect::Anthropic => e.to_anthropic_error(),
    };
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        axum::Json(body),
    )
        .into_response()
}

/// The gateway socket of `workspace` on the host
/// (`/run/pincer/gateway/gateway.sock` in its container), in a host-owned
/// folder the container has read-only.
pub fn workspace_socket(home: &Path, workspace: &str) -> std::path::PathBuf {
    pincer_runner_protocol::mounts::gateway_dir(&home.join("run").join(workspace))
        .join("gateway.sock")
}

/// Refuses to serve the gateway on `addr` (`gateway.listen` or a
/// `--listen` flag) beyond loopback without `gateway.allow_remote` and
/// `gateway.metrics_key` — the rule `pincer config check` applies to the file.
///
/// # Errors
/// The refusal, naming the key to set.
pub fn check_listen(
    config: &crate::config::Gateway,
    addr: std::net::SocketAddr,
) -> anyhow::Result<()> {
    if crate::config::is_loopback(&addr) {
        return Ok(());
    }
    if !config.allow_remote {
        anyhow::bail!("{}", crate::config::remote_refusal("gateway", &addr));
    }
    if config.metrics_key.is_none() {
        anyhow::bail!("{}", crate::config::metrics_key_refusal(&addr));
    }
    Ok(())
}

/// What the gateway works with, opened by the composition root
/// (`daemon::build::gateway`) on this home's `pincer.db`.
pub struct Services {
    pub audit: Arc<AuditLog>,
    /// Gateway keys, and the containers' tokens it mints.
    pub keys: Arc<KeyStore>,
    /// Budgets, usage and the audit events of answered calls.
    pub ledger: Arc<Ledger>,
    /// The process's plugin host, for MCP skills; `None` starts one on the
    /// first skill call (a gateway that may never call one).
    pub plugins: Option<Arc<crate::plugins::PluginHost>>,
    pub memory: Arc<crate::memory::MemoryStore>,
    pub schedules: Arc<crate::scheduler::Store>,
    /// The permits a skill or MCP call needs where approvals are in force.
    pub approvals: Arc<crate::approvals::Approvals>,
}

impl Gateway {
    pub fn new(config: &Config, home: &Path, services: Services) -> anyhow::Result<Self> {
        let Services {
            audit,
            keys,
            ledger,
            plugins,
            memory,
            schedules,
            approvals,
        } = services;
        let state = config.state.location(home).map_err(anyhow::Error::msg)?;
        let embeddings =
            super::embeddings::Embeddings::new(home.to_owned(), memory.embedder().cloned());
        let reaches = Arc::new(Reaches::compute(config));
        for (workspace, reach) in reaches.iter() {
            if let Some(why) = &reach.unavailable {
                tracing::error!(workspace = workspace.as_str(), "{why}");
            }
        }
        let mcp = Arc::new(super::mcp::McpGateway::new(
            config,
            home,
            audit,
            reaches.clone(),
            super::mcp::Stores {
                plugins,
                memory,
                schedules,
                approvals: approvals.clone(),
                ledger: ledger.clone(),
            },
        ));
        Ok(Self {
            router: LlmRouter::new(&config.gateway, llm::UpstreamClient::new()?)?.with_local(
                llm::local::LocalSettings {
                    models_dir: Some(home.join("models")),
                    ..Default::default()
                },
            ),
            embeddings,
            keys,
            ledger,
            approvals,
            prices: PriceTable::new(&config.gateway.prices),
            cache: ResponseCache::from_config(&config.gateway.cache),
            budgets: config
                .workspaces
                .iter()
                .map(|(name, ws)| (name.clone(), ws.budget))
                .collect(),
            max_request_bytes: usize::try_from(config.gateway.max_request_bytes)
                .unwrap_or(usize::MAX),
            reaches,
            mcp,
            metrics: Metrics::new(state),
            limits: config.gateway.limits,
            metrics_key: config.gateway.metrics_key.clone(),
        })
    }

    /// Writes every queued usage row and audit event and gives this
    /// process's budget leases back: for a normal stop and SIGTERM.
    pub fn shutdown(&self) {
        self.ledger.shutdown();
    }

    /// The skill or MCP server an exposed tool (`PREFIX__TOOL`) of
    /// `workspace` comes from; `None` for the built-in sources and names
    /// the workspace cannot reach.
    pub fn tool_source(
        &self,
        workspace: &str,
        exposed: &str,
    ) -> Option<(crate::approvals::SourceKind, String)> {
        let name = crate::config::ToolName::parse(exposed)?;
        let (kind, _) = self.reaches.get(workspace)?.source(&name.plugin).ok()?;
        match kind {
            crate::policy::SourceKind::Skill => {
                Some((crate::approvals::SourceKind::Skill, name.plugin))
            }
            crate::policy::SourceKind::Server => {
                Some((crate::approvals::SourceKind::Mcp, name.plugin))
            }
            crate::policy::SourceKind::Memory | crate::policy::SourceKind::Schedule => None,
        }
    }

    /// Whether the skill or MCP tool `exposed` is read-class in
    /// `workspace` ([`super::mcp::McpGateway::tool_class`]).
    pub fn tool_class(&self, workspace: &str, exposed: &str) -> crate::approvals::ToolClass {
        self.mcp.tool_class(workspace, exposed)
    }

    /// The process's approvals (requests, decisions, the gateway's permits).
    pub fn approvals(&self) -> &Arc<crate::approvals::Approvals> {
        &self.approvals
    }

    pub fn keys(&self) -> &KeyStore {
        &self.keys
    }

    /// The budget ledger: usage and spend.
    pub fn ledger(&self) -> &Arc<super::Ledger> {
        &self.ledger
    }

    /// What mints and revokes containers' gateway tokens, for the container
    /// runtime (which holds no store of its own).
    pub fn container_grants(&self) -> Arc<dyn crate::containers::GrantMinter> {
        self.keys.clone()
    }

    /// Serves the gateway on `$PINCER_HOME/run/<workspace>/gateway/gateway.sock`,
    /// the socket mounted into the workspace's container, until the
    /// returned task is aborted. A stale socket file is replaced.
    pub fn serve_workspace_socket(
        self: &Arc<Self>,
        home: &Path,
        workspace: &str,
    ) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
        use anyhow::Context as _;
        let path = workspace_socket(home, workspace);
        // A host-owned folder (0755, a real directory, mounted read-only
        // into the container): no container can rename or relink its
        // entries, so remove, bind and chmod by path are safe here.
        if let Some(dir) = path.parent() {
            crate::containers::ensure_dir(dir, 0o755, None)
                .with_context(|| format!("preparing {}", dir.display()))?;
        }
        let _ = std::fs::remove_file(&path);
        let socket = tokio::net::UnixListener::bind(&path)
            .with_context(|| format!("binding {}", path.display()))?;
        // The container's user must be able to connect; the key still decides.
        std::fs::set_permissions(
            &path,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o666),
        )?;
        let routes = self.routes();
        let limits = self.limits.workspace().into();
        let name = format!("gateway socket of workspace {workspace}");
        Ok(tokio::spawn(async move {
            crate::listener::serve(socket, routes, limits, name, std::future::pending()).await;
            Ok(())
        }))
    }

    /// Serves [`Self::tcp_routes`] on `listener` within `gateway.limits`
    /// until `shutdown` resolves, then until its connections have closed.
    pub async fn serve_tcp(
        self: &Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) {
        let limits = self.limits.tcp().into();
        crate::listener::serve(
            listener,
            self.tcp_routes(),
            limits,
            "gateway.listen".into(),
            shutdown,
        )
        .await;
    }

    /// [`Self::routes`] plus `GET /metrics` (Prometheus): for the TCP
    /// listener only, never a workspace's socket.
    pub fn tcp_routes(self: &Arc<Self>) -> Router {
        self.routes().merge(
            Router::new()
                .route("/metrics", get(metrics))
                .with_state(self.clone()),
        )
    }

    /// The OpenAI- and Anthropic-style endpoints and `/mcp`, the same on
    /// the TCP listener and on every workspace socket.
    pub fn routes(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/v1/models", get(models))
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/messages", post(messages))
            .with_state(self.clone())
            .merge(self.mcp.routes({
                let gateway = self.clone();
                move |headers: &HeaderMap| {
                    gateway
                        .authenticate(headers)
                        .map(|key| key.workspace)
                        .map_err(|e| Box::new(e.respond(Dialect::OpenAi)))
                }
            }))
    }

    /// What each workspace may reach, as computed at load.
    pub fn reaches(&self) -> &Arc<Reaches> {
        &self.reaches
    }

    fn authenticate(&self, headers: &HeaderMap) -> Result<KeyInfo, ApiError> {
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            });
        let token = bearer.or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()));
        let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
            return Err(ApiError::new(
                401,
                "missing_api_key",
                "no API key: send `Authorization: Bearer <key>` with a key from `pincer gateway keys create WORKSPACE`",
            ));
        };
        let key = self.keys.verify(token).ok_or_else(|| {
            ApiError::new(
                401,
                "invalid_api_key",
                "the API key is not valid (unknown or revoked)",
            )
        })?;
        if self.reaches.get(&key.workspace).is_none() {
            let workspace = &key.workspace;
            let reason = format!(
                "the API key belongs to workspace `{workspace}`, which is not in the configuration \
                 (no workspaces.{workspace}): add the workspace back, or revoke the key with \
                 `pincer gateway keys revoke {workspace} {}`",
                key.name
            );
            self.ledger.audit(
                actor(&key),
                Some(workspace),
                crate::audit::Action::GatewayDenied,
                &reason,
            );
            return Err(ApiError::new(403, "unconfigured_workspace", reason));
        }
        Ok(key)
    }

    /// The reach of an authenticated key's workspace ([`Self::authenticate`]
    /// refuses keys of workspaces that are not configured).
    fn reach(&self, key: &KeyInfo) -> Result<&WorkspaceReach, ApiError> {
        self.reaches
            .get(&key.workspace)
            .map(|r| &**r)
            .ok_or_else(|| {
                ApiError::new(
                    403,
                    "unconfigured_workspace",
                    format!("workspace `{}` is not in the configuration", key.workspace),
                )
            })
    }

    /// Authenticates, reads and parses the body as a JSON object.
    async fn accept(&self, request: Request) -> Result<(KeyInfo, Value), ApiError> {
        let key = self.authenticate(request.headers())?;
        let bytes: Bytes = axum::body::to_bytes(request.into_body(), self.max_request_bytes)
            .await
            .map_err(|e| {
                if crate::listener::BodyTimedOut::caused(&e) {
                    return ApiError::new(
                        408,
                        "request_timeout",
                        format!(
                            "the request body did not arrive within {} s (gateway.limits.body_secs)",
                            self.limits.body_secs
                        ),
                    );
                }
                ApiError::new(
                    413,
                    "request_too_large",
                    format!(
                        "the request body is larger than {} bytes (gateway.max_request_bytes)",
                        self.max_request_bytes
                    ),
                )
            })?;
        let body: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::new(
                400,
                "invalid_json",
                format!("the request body is not valid JSON: {e}"),
            )
        })?;
        if !body.is_object() {
            return Err(ApiError::new(
                400,
                "invalid_request",
                "the request body must be a JSON object",
            ));
        }
        Ok((key, body))
    }

    /// Budget, cache, routing and accounting for one OpenAI-shaped request.
    async fn dispatch(
        &self,
        key: &KeyInfo,
        request: Value,
        endpoint: &'static str,
        started: Instant,
    ) -> Result<Dispatched, Response> {
        let alias = request["model"].as_str().unwrap_or_default().to_string();
        // Back-pressure: wait while the usage writer is behind.
        self.ledger.room().await;
        let mut upstream = Duration::ZERO;
        let result = self
            .dispatch_counted(key, request, endpoint, &mut upstream)
            .await;
        let outcome = match &result {
            Ok(Dispatched::Complete { cached: true, .. }) => Outcome::Cached,
            Ok(_) => Outcome::Ok,
            Err(response) if response.status().is_server_error() => Outcome::Error,
            Err(_) => Outcome::Denied,
        };
        // The model is whatever the caller sent: only configured aliases
        // become label values, or a container could grow the host's memory
        // without bound with one series per made-up name.
        let model = if self.router.serves(&alias) {
            alias.as_str()
        } else {
            UNKNOWN_MODEL_LABEL
        };
        self.metrics.request(&key.workspace, model, outcome);
        self.metrics
            .added_latency(endpoint, started.elapsed().saturating_sub(upstream));
        result
    }

    /// [`Self::dispatch`]'s work; `upstream` gets the time the upstream call
    /// took.
    async fn dispatch_counted(
        &self,
        key: &KeyInfo,
        request: Value,
        endpoint: &'static str,
        upstream: &mut Duration,
    ) -> Result<Dispatched, Response> {
        let dialect = if endpoint == "messages" {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        };
        let workspace = key.workspace.as_str();
        let alias = request["model"].as_str().unwrap_or_default().to_string();
        self.admit(key, &alias).map_err(|e| e.respond(dialect))?;
        if self.router.embedding_model(&alias).is_some() {
            return Err(ApiError::new(
                400,
                "invalid_request",
                format!("model `{alias}` is an embedding model: use POST /v1/embeddings"),
            )
            .respond(dialect));
        }
        if let Some(cache) = &self.cache
            && ResponseCache::cacheable(&request)
            && let Some(hit) = cache.get(workspace, endpoint, &request)
        {
            if let Err(e) = self.ledger.record(
                workspace,
                &alias,
                "cache",
                SpentUsage::default(),
                Some(0.0),
                true,
            ) {
                tracing::warn!("cannot record a cache hit: {e}");
            }
            self.ledger.audit(
                actor(key),
                Some(workspace),
                crate::audit::Action::GatewayCall,
                &format!("{alias}: cache hit"),
            );
            return Ok(Dispatched::Complete {
                body: hit.to_string(),
                response: hit,
                deployment: "cache".into(),
                cached: true,
            });
        }
        let budget = self.budgets.get(workspace).copied().unwrap_or_default();
        let estimate = Estimate::for_request(&request, self.prices.price(&alias));
        let reservation = self
            .ledger
            .reserve_async(workspace, budget, &alias, estimate)
            .await
            .map_err(|e| {
                self.ledger.audit(
                    actor(key),
                    Some(workspace),
                    crate::audit::Action::GatewayDenied,
                    &e.to_string(),
                );
                let (status, body) = e.to_openai_error();
                (
                    StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                    axum::Json(body),
                )
                    .into_response()
            })?;
        // Kept for the response cache only: most calls hand the request over.
        let cache_key = self
            .cache
            .as_ref()
            .filter(|_| ResponseCache::cacheable(&request))
            .map(|cache| (cache, request.clone()));
        let called = Instant::now();
        let answered = self.router.chat(request).await;
        *upstream = called.elapsed();
        match answered {
            Ok(ChatOutcome::Complete {
                response,
                usage,
                deployment,
            }) => {
                let cost = price_of(self.prices.price(&deployment.model), &usage);
                self.metrics.usage(
                    workspace,
                    &alias,
                    usage.prompt_tokens.into(),
                    usage.completion_tokens.into(),
                    cost,
                );
                if let Err(e) = self.ledger.settle(
                    reservation,
                    spent(&usage),
                    cost,
                    &deployment.to_string(),
                    false,
                ) {
                    tracing::error!("cannot settle a gateway call: {e}");
                }
                self.ledger.audit(
                    actor(key),
                    Some(workspace),
                    crate::audit::Action::GatewayCall,
                    &format!(
                        "{alias} answered by {deployment}: {} + {} tokens",
                        usage.prompt_tokens, usage.completion_tokens
                    ),
                );
                let text = response.to_string();
                // Parsed again only when redaction changed something.
                let (body, response) = match self.router.redacted(&text) {
                    None => (text, response),
                    Some(body) => {
                        let response = serde_json::from_str(&body).unwrap_or(response);
                        (body, response)
                    }
                };
                if let Some((cache, request)) = cache_key {
                    cache.put(workspace, endpoint, &request, response.clone());
                }
                Ok(Dispatched::Complete {
                    response,
                    body,
                    deployment: deployment.short(),
                    cached: false,
                })
            }
            Ok(ChatOutcome::Stream {
                events,
                deployment,
                usage,
            }) => {
                let ledger = self.ledger.clone();
                let metrics = self.metrics.clone();
                let price = self.prices.price(&deployment.model);
                let (who, ws, name) = (
                    key.workspace.clone(),
                    workspace.to_string(),
                    deployment.to_string(),
                );
                let model = alias.clone();
                tokio::spawn(async move {
                    let usage = usage.await.unwrap_or_default();
                    let cost = price_of(price, &usage);
                    metrics.usage(
                        &ws,
                        &model,
                        usage.prompt_tokens.into(),
                        usage.completion_tokens.into(),
                        cost,
                    );
                    if let Err(e) = ledger.settle(reservation, spent(&usage), cost, &name, false) {
                        tracing::error!("cannot settle a streamed gateway call: {e}");
                    }
                    ledger.audit(
                        crate::audit::Actor::Workspace(&who),
                        Some(&ws),
                        crate::audit::Action::GatewayCall,
                        &format!(
                            "{name} (streamed): {} + {} tokens",
                            usage.prompt_tokens, usage.completion_tokens
                        ),
                    );
                });
                Ok(Dispatched::Stream {
                    events,
                    deployment: deployment.short(),
                })
            }
            Err(e) => {
                if let Err(release) = self.ledger.release(reservation) {
                    tracing::error!("cannot release a budget reservation: {release}");
                }
                self.ledger.audit(
                    actor(key),
                    Some(workspace),
                    crate::audit::Action::GatewayError,
                    &self.router.redact(&e.to_string()),
                );
                Err(llm_error(&e, dialect))
            }
        }
    }
}

/// Why a call's model alias is refused.
enum Refused {
    Api(ApiError),
    Llm(LlmError),
}

impl Refused {
    fn respond(self, dialect: Dialect) -> Response {
        match self {
            Refused::Api(e) => e.respond(dialect),
            Refused::Llm(e) => llm_error(&e, dialect),
        }
    }
}

impl From<ApiError> for Refused {
    fn from(e: ApiError) -> Self {
        Refused::Api(e)
    }
}

impl Gateway {
    /// Whether `key`'s workspace may call model `alias`: it is given, is
    /// configured and the workspace's reach admits it (a refusal by policy
    /// is audited).
    fn admit(&self, key: &KeyInfo, alias: &str) -> Result<(), Refused> {
        if alias.is_empty() {
            return Err(ApiError::new(
                400,
                "invalid_request",
                "`model` is required (a model_name from gateway.model_list)",
            )
            .into());
        }
        let reach = self.reach(key)?;
        if !self.router.serves(alias) {
            return Err(Refused::Llm(LlmError::UnknownModel {
                alias: alias.to_owned(),
                known: reach.models.aliases.clone(),
            }));
        }
        if let Err(reason) = reach.model(alias) {
            self.ledger.audit(
                actor(key),
                Some(&key.workspace),
                crate::audit::Action::GatewayDenied,
                &reason,
            );
            return Err(ApiError::new(403, "model_not_allowed", reason).into());
        }
        Ok(())
    }

    /// `POST /v1/embeddings` after authentication: the alias's checks, the
    /// request's, one embedding at a time per workspace, recorded at zero
    /// cost.
    async fn embed(&self, key: &KeyInfo, body: Value) -> Result<Value, Refused> {
        let workspace = key.workspace.as_str();
        let alias = body["model"].as_str().unwrap_or_default().to_owned();
        // A refusal is queued for the writer too: the same back-pressure as
        // model calls, so refused requests cannot pile records up in memory
        // while the writer waits on a locked database.
        self.ledger.room().await;
        self.admit(key, &alias)?;
        let Some(model) = self.router.embedding_model(&alias) else {
            return Err(ApiError::new(
                400,
                "invalid_request",
                format!(
                    "model `{alias}` does not give embeddings: give one a gateway.model_list entry \
                     with model local/{}",
                    super::model_fetch::E5_SMALL.name
                ),
            )
            .into());
        };
        let unavailable = |why: String| ApiError::new(503, "model_unavailable", why);
        let embedder = self.embeddings.embedder().ok_or_else(|| {
            unavailable(format!(
                "the embedding model is not installed: run `pincer model fetch {}`",
                model.name
            ))
        })?;
        let encoder = embedder
            .encoder()
            .map_err(|why| unavailable(why.to_owned()))?;
        let invalid = |r: super::embeddings::Refused| ApiError::new(400, r.code, r.message);
        let request = super::embeddings::Request::parse(body, encoder.dim()).map_err(invalid)?;
        // Tokenizing up to 32 × 8 KiB is CPU work: off the async threads
        // (`gateway serve` runs on one).
        let counting = encoder.clone();
        let (request, tokens) = tokio::task::spawn_blocking(move || {
            let tokens = request.tokens(&counting);
            (request, tokens)
        })
        .await
        .map_err(|e| ApiError::new(500, "embedding_failed", format!("counting tokens: {e}")))?;
        let tokens = tokens.map_err(invalid)?;
        let (inputs, base64) = (request.inputs.len(), request.base64);
        let vectors = self
            .embeddings
            .embed(workspace, embedder, request)
            .await
            .map_err(|why| ApiError::new(500, "embedding_failed", why))?;
        let deployment = format!("local/{}", model.name);
        let usage = SpentUsage {
            prompt_tokens: tokens as u64,
            completion_tokens: 0,
        };
        if let Err(e) = self
            .ledger
            .record(workspace, &alias, &deployment, usage, Some(0.0), false)
        {
            tracing::warn!("cannot record an embeddings call: {e}");
        }
        self.metrics.request(workspace, &alias, Outcome::Ok);
        self.metrics
            .usage(workspace, &alias, tokens as u64, 0, Some(0.0));
        self.ledger.audit(
            actor(key),
            Some(workspace),
            crate::audit::Action::GatewayCall,
            &format!("{alias} embeddings by {deployment}: {inputs} input(s), {tokens} tokens"),
        );
        Ok(super::embeddings::response(
            &alias, &vectors, tokens, base64,
        ))
    }
}

async fn embeddings(State(gateway): State<Arc<Gateway>>, request: Request) -> Response {
    let answered = match gateway.accept(request).await {
        Ok((key, body)) => gateway.embed(&key, body).await,
        Err(e) => Err(e.into()),
    };
    match answered {
        Ok(body) => axum::Json(body).into_response(),
        Err(e) => e.respond(Dialect::OpenAi),
    }
}

enum Dispatched {
    Complete {
        response: Value,
        /// `response` as JSON text, as sent on the OpenAI endpoint (the
        /// redacted text itself, not serialized a second time).
        body: String,
        deployment: String,
        cached: bool,
    },
    Stream {
        events: BoxStream<'static, Result<Value, LlmError>>,
        deployment: String,
    },
}

fn spent(usage: &llm::Usage) -> SpentUsage {
    SpentUsage {
        prompt_tokens: usage.prompt_tokens.into(),
        completion_tokens: usage.completion_tokens.into(),
    }
}

fn price_of(price: Option<super::cost::Price>, usage: &llm::Usage) -> Option<f64> {
    price.map(|p| p.cost(usage.prompt_tokens.into(), usage.completion_tokens.into()))
}

/// `a == b` in time that depends only on their lengths.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn actor(key: &KeyInfo) -> crate::audit::Actor<'_> {
    crate::audit::Actor::Workspace(&key.workspace)
}

async fn models(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let reach = match gateway
        .authenticate(&headers)
        .and_then(|key| gateway.reach(&key).cloned())
    {
        Ok(reach) => reach,
        Err(e) => return e.respond(Dialect::OpenAi),
    };
    let data: Vec<Value> = reach
        .models
        .aliases
        .iter()
        .filter(|alias| gateway.router.serves(alias))
        .map(|id| json!({"id": id, "object": "model", "created": 0, "owned_by": "pincer"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /metrics`: Prometheus text ([`super::metrics`]); with
/// `gateway.metrics_key`, only for `Authorization: Bearer <that key>`.
async fn metrics(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if let Some(key) = &gateway.metrics_key {
        let sent = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        if !same_secret(sent.trim().as_bytes(), key.as_bytes()) {
            return ApiError::new(
                401,
                "invalid_metrics_key",
                "/metrics needs `Authorization: Bearer <gateway.metrics_key>`",
            )
            .respond(Dialect::OpenAi);
        }
    }
    let budgets: Vec<_> = gateway
        .budgets
        .iter()
        .filter(|(_, budget)| !budget.is_unlimited())
        .filter_map(|(workspace, budget)| {
            let spend = gateway.ledger.spend(workspace).ok()?;
            Some((workspace.clone(), *budget, spend))
        })
        .collect();
    let text = gateway.metrics.render(&budgets);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn chat_completions(State(gateway): State<Arc<Gateway>>, request: Request) -> Response {
    let started = Instant::now();
    let (key, body) = match gateway.accept(request).await {
        Ok(accepted) => accepted,
        Err(e) => return e.respond(Dialect::OpenAi),
    };
    let include_usage = body["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    match gateway.dispatch(&key, body, "chat", started).await {
        Err(response) => response,
        Ok(Dispatched::Complete {
            body,
            deployment,
            cached,
            ..
        }) => with_headers(
            (
                [(
                    axum::http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response(),
            &deployment,
            cached,
        ),
        Ok(Dispatched::Stream { events, deployment }) => {
            let redactor = Arc::clone(&gateway);
            let body = events
                .filter(move |item| {
                    // Usage-only chunks go to clients that asked for them.
                    let keep = include_usage
                        || !matches!(item, Ok(chunk) if chunk["choices"].as_array().is_some_and(Vec::is_empty));
                    std::future::ready(keep)
                })
                .map(move |item| {
                    let data = match item {
                        Ok(chunk) => redactor.router.redact_owned(chunk.to_string()),
                        Err(e) => e.to_openai_error().1.to_string(),
                    };
                    Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {data}\n\n")))
                })
                .chain(futures_util::stream::once(async { Ok(Bytes::from(llm::OPENAI_SSE_DONE)) }));
            with_headers(sse(Body::from_stream(body)), &deployment, false)
        }
    }
}

async fn messages(State(gateway): State<Arc<Gateway>>, request: Request) -> Response {
    let started = Instant::now();
    let (key, body) = match gateway.accept(request).await {
        Ok(accepted) => accepted,
        Err(e) => return e.respond(Dialect::Anthropic),
    };
    let model = body["model"].as_str().unwrap_or_default().to_string();
    let openai = match llm::anthropic_request_to_openai(body) {
        Ok(request) => request,
        Err(e) => return llm_error(&e, Dialect::Anthropic),
    };
    match gateway.dispatch(&key, openai, "messages", started).await {
        Err(response) => response,
        Ok(Dispatched::Complete {
            response,
            deployment,
            cached,
            ..
        }) => with_headers(
            axum::Json(llm::openai_response_to_anthropic(response)).into_response(),
            &deployment,
            cached,
        ),
        Ok(Dispatched::Stream { events, deployment }) => {
            let redactor = Arc::clone(&gateway);
            let body = llm::openai_stream_to_anthropic(events, &model).map(move |item| {
                let event = match item {
                    Ok(event) => event,
                    Err(e) => llm::AnthropicEvent::error(&e),
                };
                Ok::<_, std::convert::Infallible>(Bytes::from(
                    redactor.router.redact_owned(event.to_sse()),
                ))
            });
            with_headers(sse(Body::from_stream(body)), &deployment, false)
        }
    }
}

fn sse(body: Body) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn with_headers(mut response: Response, deployment: &str, cached: bool) -> Response {
    if let Ok(value) = HeaderValue::from_str(deployment) {
        response.headers_mut().insert(DEPLOYMENT_HEADER, value);
    }
    response.headers_mut().insert(
        CACHE_HEADER,
        HeaderValue::from_static(if cached { "hit" } else { "miss" }),
    );
    response
}
