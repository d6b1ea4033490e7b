//! The MCP gateway: one streamable-HTTP MCP endpoint (`/mcp`) whose tools are
//! exactly those the caller's workspace may use, named `<server>__<tool>` for
//! configured MCP servers, `<skill>__<tool>` for WASM skills, `memory__<tool>`
//! for the workspace's long-term memory (when enabled) and `schedule__<tool>`
//! for tasks the agent schedules (when `agent_schedules` allows). The pincer
//! key (`Authorization: Bearer`) decides the workspace on every request;
//! refused calls are audited as `gateway.denied`, allowed ones as
//! `gateway.tool_call`, through the gateway's writer as model calls are. `rmcp`
//! stays inside this module.

pub mod acl;
mod memory;
mod schedule;
mod skills;
mod upstream;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::Response;
use rmcp::ErrorData;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use self::acl::Source;
use self::memory::MemoryTools;
use self::schedule::ScheduleTools;
use self::skills::Skills;
use self::upstream::Upstreams;
use crate::audit::AuditLog;
use crate::config::{Config, ToolName};
use crate::policy::{Reaches, WorkspaceReach};

/// The workspace a request was authenticated for, put into the request's
/// extensions by the gateway's auth layer.
#[derive(Debug, Clone)]
pub struct Caller {
    pub workspace: String,
}

/// Shared by every MCP request: configuration, each workspace's reach
/// (computed once, by [`crate::gateway::Gateway::new`]), skills and server
/// connections.
pub struct McpGateway {
    config: Arc<Config>,
    reaches: Arc<Reaches>,
    skills: Skills,
    upstreams: Upstreams,
    memory: MemoryTools,
    schedule: ScheduleTools,
    approvals: Arc<crate::approvals::Approvals>,
    /// Where the calls' own records (answered, refused) go: the gateway's
    /// writer, as for model calls, so a locked database holds up neither the
    /// call nor (in `gateway serve`) the one thread, and loses no record.
    ledger: Arc<crate::gateway::Ledger>,
    /// By workspace: its tools (as exposed) that are read-class, from the
    /// last listing: annotated read-only by a source the operator trusts.
    read_only: std::sync::Mutex<BTreeMap<String, BTreeSet<String>>>,
}

/// The stores the MCP tools work on, handed in by the gateway's builder.
pub struct Stores {
    /// `None`: a plugin host is started on the first skill call.
    pub plugins: Option<Arc<crate::plugins::PluginHost>>,
    pub memory: Arc<crate::memory::MemoryStore>,
    pub schedules: Arc<crate::scheduler::Store>,
    pub approvals: Arc<crate::approvals::Approvals>,
    pub ledger: Arc<crate::gateway::Ledger>,
}

impl McpGateway {
    pub fn new(
        config: &Config,
        home: &Path,
        audit: Arc<AuditLog>,
        reaches: Arc<Reaches>,
        stores: Stores,
    ) -> Self {
        Self {
            config: Arc::new(config.clone()),
            reaches,
            skills: Skills::new(config, home, stores.plugins, audit.clone()),
            upstreams: Upstreams::new(
                Arc::new(config.clone()),
                crate::containers::McpContainers::new(home, audit.clone()),
            ),
            memory: MemoryTools::new(stores.memory),
            schedule: ScheduleTools::new(stores.schedules, Arc::new(config.clone()), audit),
            approvals: stores.approvals,
            ledger: stores.ledger,
            read_only: std::sync::Mutex::default(),
        }
    }

    /// Whether `exposed` is a read-class tool of `workspace`: one whose
    /// source the operator trusts (`skills.NAME.trust_effects`,
    /// `mcp_servers.NAME.trust_annotations`) marked it read-only and not
    /// destructive when the workspace last listed its tools. Anything else,
    /// unlisted tools included, is write-class.
    pub fn tool_class(&self, workspace: &str, exposed: &str) -> crate::approvals::ToolClass {
        let read = self.read_only.lock().is_ok_and(|r| {
            r.get(workspace)
                .is_some_and(|tools| tools.contains(exposed))
        });
        if read {
            crate::approvals::ToolClass::Read
        } else {
            crate::approvals::ToolClass::Write
        }
    }

    /// `POST/GET /mcp`. `authenticate` maps request headers to the caller's
    /// workspace, or to the error response to send.
    pub fn routes<A>(self: &Arc<Self>, authenticate: A) -> Router
    where
        A: Fn(&HeaderMap) -> Result<String, Box<Response>> + Send + Sync + 'static,
    {
        let gateway = self.clone();
        let config = StreamableHttpServerConfig::default()
            // Every request carries a pincer key, checked before rmcp sees it;
            // the gateway also answers on unix sockets and configured hosts.
            .disable_allowed_hosts()
            .with_legacy_session_mode(false)
            .with_json_response(true);
        let service = StreamableHttpService::new(
            move || {
                Ok(Handler {
                    gateway: gateway.clone(),
                })
            },
            Arc::new(NeverSessionManager::default()),
            config,
        );
        Router::new()
            .route_service("/mcp", service)
            .layer(middleware::from_fn_with_state(
                Arc::new(authenticate),
                auth::<A>,
            ))
    }

    fn reach(&self, workspace: &str) -> Result<&WorkspaceReach, McpError> {
        self.reaches.get(workspace).map(|r| &**r).ok_or_else(|| {
            McpError::Refused(format!(
                "workspace `{workspace}` is not in the configuration (workspaces.{workspace}): it reaches nothing"
            ))
        })
    }

    /// Every tool `workspace` may call, namespaced.
    async fn list(&self, workspace: &str) -> Vec<Tool> {
        let mut out = Vec::new();
        let Ok(reach) = self.reach(workspace) else {
            return out;
        };
        let mut read_only = BTreeSet::new();
        for source in acl::sources(&self.config, reach) {
            let listed = match &source {
                Source::Skill { name, .. } => self.skills.tools(workspace, name).await,
                Source::Server { name, server } => self.upstreams.list_tools(name, server).await,
                Source::Memory => Ok(memory::tools()),
                Source::Schedule => Ok(schedule::tools()),
            };
            let trusted = match &source {
                Source::Skill { name, .. } => self
                    .config
                    .trusts_read_claims(crate::approvals::SourceKind::Skill, name),
                Source::Server { name, .. } => self
                    .config
                    .trusts_read_claims(crate::approvals::SourceKind::Mcp, name),
                Source::Memory | Source::Schedule => false,
            };
            match listed {
                Ok(tools) => out.extend(tools.into_iter().filter_map(|mut tool| {
                    if !source.allows_tool(&tool.name) {
                        return None;
                    }
                    tool.name = ToolName::new(source.name(), tool.name).to_string().into();
                    if trusted && reads_only(&tool) {
                        read_only.insert(tool.name.to_string());
                    }
                    Some(tool)
                })),
                Err(e) => tracing::warn!(workspace, source = source.name(), "{e}"),
            }
        }
        if let Ok(mut known) = self.read_only.lock() {
            known.insert(workspace.to_string(), read_only);
        }
        out
    }

    /// Where approvals are in force (any tier but `yolo`), a skill or MCP
    /// call runs only on a permit the turn engine gave for exactly these
    /// arguments, whatever the container sends.
    fn approved(
        &self,
        workspace: &str,
        exposed: &str,
        source: &Source,
        arguments: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<(), String> {
        let kind = match source {
            Source::Skill { name, .. } => (crate::approvals::SourceKind::Skill, name.as_str()),
            Source::Server { name, .. } => (crate::approvals::SourceKind::Mcp, name.as_str()),
            Source::Memory | Source::Schedule => return Ok(()),
        };
        let Some(policy) = self.config.approval_policy(workspace, None, None) else {
            return Ok(());
        };
        if policy.tier == crate::approvals::Tier::Yolo {
            return Ok(());
        }
        let arguments = serde_json::Value::Object(arguments.cloned().unwrap_or_default());
        let call = crate::approvals::Call {
            tool: exposed,
            source: Some(kind),
            arguments: &arguments,
        };
        if self.approvals.take_permit(workspace, &call.fingerprint()) {
            return Ok(());
        }
        Err(format!(
            "`{exposed}` was refused: workspace `{workspace}` runs a skill or MCP tool only when \
             its turn let exactly this call through (approvals are in force), and no such \
             permission is held for these arguments"
        ))
    }

    async fn call(
        &self,
        workspace: &str,
        request: CallToolRequestParams,
    ) -> Result<CallToolResult, ErrorData> {
        let actor = crate::audit::Actor::Workspace(workspace);
        // Each call ends in a record: wait while the writer is behind.
        self.ledger.room().await;
        let exposed = request.name.to_string();
        let resolved = self
            .reach(workspace)
            .and_then(|reach| acl::resolve(&self.config, reach, &exposed));
        let (source, tool) = match resolved {
            Ok(resolved) => resolved,
            Err(reason) => {
                let reason = reason.to_string();
                self.ledger.audit(
                    actor,
                    Some(workspace),
                    crate::audit::Action::GatewayDenied,
                    &reason,
                );
                return Err(ErrorData::invalid_params(reason, None));
            }
        };
        if let Err(reason) = self.approved(workspace, &exposed, &source, request.arguments.as_ref())
        {
            self.ledger.audit(
                actor,
                Some(workspace),
                crate::audit::Action::ApprovalRefusedUnapproved,
                &reason,
            );
            return Err(ErrorData::invalid_request(reason, None));
        }
        let outcome = match &source {
            Source::Skill { name, .. } => {
                let args = request
                    .arguments
                    .map(serde_json::Value::Object)
                    .unwrap_or_else(|| serde_json::json!({}));
                self.skills
                    .invoke(workspace, name, &tool, &args.to_string())
                    .await
            }
            Source::Server { name, server } => {
                self.upstreams
                    .call_tool(name, server, &tool, request.arguments)
                    .await
            }
            Source::Memory => self.memory.call(workspace, &tool, request.arguments).await,
            Source::Schedule => {
                self.schedule
                    .call(workspace, &tool, request.arguments)
                    .await
            }
        };
        let detail = match &outcome {
            Ok(result) if result.is_error == Some(true) => format!("{exposed}: tool error"),
            Ok(_) => format!("{exposed}: ok"),
            Err(e) => format!("{exposed}: {e}"),
        };
        self.ledger.audit(
            actor,
            Some(workspace),
            crate::audit::Action::GatewayToolCall,
            &detail,
        );
        outcome.map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

async fn auth<A>(State(authenticate): State<Arc<A>>, mut request: Request, next: Next) -> Response
where
    A: Fn(&HeaderMap) -> Result<String, Box<Response>> + Send + Sync + 'static,
{
    match authenticate(request.headers()) {
        Ok(workspace) => {
            request.extensions_mut().insert(Caller { workspace });
            next.run(request).await
        }
        Err(response) => *response,
    }
}

/// One per MCP request (the endpoint is stateless).
struct Handler {
    gateway: Arc<McpGateway>,
}

fn caller(context: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .map(|c| c.workspace.clone())
        .ok_or_else(|| ErrorData::invalid_request("unauthenticated MCP request", None))
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("pincer", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools this workspace may call, named <server, skill, memory or schedule>__<tool>.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let workspace = caller(&context)?;
        Ok(ListToolsResult::with_all_items(
            self.gateway.list(&workspace).await,
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let workspace = caller(&context)?;
        self.gateway
            .call(&workspace, request)
            .await
            .map(CallToolResponse::from)
    }
}

/// A tool result carrying one text block.
/// Why a tool call did not reach its tool, or its tool could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The workspace may not call it (or does not exist); audited as a
    /// denial and answered as invalid parameters.
    #[error("{0}")]
    Refused(String),
    /// The tool's source failed: the plugin host, an MCP server, a store.
    #[error("{0}")]
    Failed(String),
}

/// What a skill's or server's plumbing reports in words is a failure of
/// that source (never a refusal: those come from the reach alone).
impl From<String> for McpError {
    fn from(why: String) -> Self {
        Self::Failed(why)
    }
}

/// A built-in tool's answer for the agent.
pub enum Reply {
    Done(String),
    /// The agent can fix this (bad arguments, empty text, unknown id).
    Refused(String),
}

impl Reply {
    fn into_result(self) -> CallToolResult {
        match self {
            Self::Done(text) => text_result(text, false),
            Self::Refused(text) => text_result(text, true),
        }
    }
}

fn text_result(text: String, is_error: bool) -> CallToolResult {
    if is_error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }
}

/// A tool annotated read-only (MCP's `readOnlyHint`, default false) and
/// not also destructive (`destructiveHint`, which the spec makes meaningful
/// only for tools that write; a server saying both is not believed).
fn reads_only(tool: &Tool) -> bool {
    tool.annotations
        .as_ref()
        .is_some_and(|a| a.read_only_hint == Some(true) && a.destructive_hint != Some(true))
}
