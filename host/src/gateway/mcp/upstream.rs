//! Connections to configured MCP servers: stdio child processes and
//! servers in containers of their own (`containers::mcp`, stdio over
//! Docker's attach stream) — started lazily, shared by every workspace
//! allowed to use them, restarted on next use when they die (audited; a
//! call that finds the connection closed is sent once more, to the fresh
//! server) — and
//! remote streamable-HTTP servers. Every call has the server's
//! `call_timeout_secs`; a container server that hangs is removed, and the
//! next use starts a fresh one.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, JsonObject, ResultType, Tool};
use rmcp::service::{RoleClient, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Mutex;

use super::McpError;
use crate::config::{Config, McpServer};
use crate::containers::McpContainers;

type Client = RunningService<RoleClient, ()>;

/// Why one attempt at a call failed.
enum Attempt {
    /// The connection was closed. Usually the server had died before the
    /// request (it was never delivered); a server that dies while handling
    /// a call may be sent it again by the retry.
    Closed(String),
    Failed(String),
}

/// Variables passed through from the gateway's own environment to stdio
/// servers; everything else (provider keys in particular) stays out.
const PASSED_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ"];

/// Starting a server (handshake included) or listing its tools.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// One slot per configured server, filled on first use.
pub struct Upstreams {
    slots: BTreeMap<String, Mutex<Option<Arc<Client>>>>,
    config: Arc<Config>,
    containers: McpContainers,
    /// This instance's server containers whose gateway process is gone
    /// are removed before the first one starts.
    reconciled: tokio::sync::OnceCell<()>,
}

impl Upstreams {
    pub fn new(config: Arc<Config>, containers: McpContainers) -> Self {
        Self {
            slots: config
                .mcp_servers
                .keys()
                .map(|name| (name.clone(), Mutex::new(None)))
                .collect(),
            config,
            containers,
            reconciled: tokio::sync::OnceCell::new(),
        }
    }

    fn audit(&self, server: &str, action: crate::audit::Action, detail: &str) {
        self.containers.audit().record(
            crate::audit::Actor::McpServer(server),
            None,
            action,
            detail,
        );
    }

    /// A live client for `name`, starting (or restarting) it if needed.
    async fn client(&self, name: &str, server: &McpServer) -> Result<Arc<Client>, McpError> {
        let slot = self
            .slots
            .get(name)
            .ok_or_else(|| format!("MCP server `{name}` is not configured"))?;
        let mut slot = slot.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.is_closed() {
                return Ok(client.clone());
            }
            tracing::warn!(server = name, "MCP server connection closed; restarting it");
            self.audit(
                name,
                crate::audit::Action::McpServerRestarted,
                "the server's connection had closed (it exited or crashed); starting it again",
            );
        }
        if server.container.is_some() {
            self.reconciled
                .get_or_init(|| async {
                    match self.containers.reconcile().await {
                        Ok(removed) if !removed.is_empty() => tracing::info!(
                            "removed MCP server containers of gateways that are gone: {}",
                            removed.join(", ")
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!("reconciling MCP server containers: {e}"),
                    }
                })
                .await;
        }
        let connected = tokio::time::timeout(START_TIMEOUT, self.connect(name, server))
            .await
            .map_err(|_| {
                McpError::Failed(format!(
                    "MCP server `{name}` did not start within {START_TIMEOUT:?}"
                ))
            })
            .and_then(|r| r);
        let client = match connected {
            Ok(client) => client,
            Err(e) => {
                self.audit(name, crate::audit::Action::McpServerFailed, &e.to_string());
                if server.container.is_some() {
                    let _ = self.containers.stop(name).await;
                }
                return Err(e);
            }
        };
        let client = Arc::new(client);
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Forgets a connection that failed, so the next use starts afresh (a
    /// container server's container is removed).
    async fn drop_client(&self, name: &str, failed: &Arc<Client>) {
        if let Some(slot) = self.slots.get(name) {
            let mut slot = slot.lock().await;
            if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, failed)) {
                *slot = None;
                if self
                    .config
                    .mcp_servers
                    .get(name)
                    .is_some_and(|s| s.container.is_some())
                    && let Err(e) = self.containers.stop(name).await
                {
                    tracing::warn!(server = name, "removing the server's container: {e}");
                }
            }
        }
    }

    pub async fn list_tools(&self, name: &str, server: &McpServer) -> Result<Vec<Tool>, McpError> {
        let client = self.client(name, server).await?;
        match tokio::time::timeout(START_TIMEOUT, client.list_all_tools()).await {
            Ok(Ok(tools)) => Ok(tools),
            Err(_) => {
                self.drop_client(name, &client).await;
                Err(McpError::Failed(format!(
                    "MCP server `{name}` did not list its tools within {START_TIMEOUT:?}"
                )))
            }
            Ok(Err(e)) => {
                self.drop_client(name, &client).await;
                Err(McpError::Failed(format!(
                    "MCP server `{name}` failed to list its tools: {e}"
                )))
            }
        }
    }

    pub async fn call_tool(
        &self,
        name: &str,
        server: &McpServer,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
        match self.call_once(name, server, tool, arguments.clone()).await {
            // The connection was found closed (typically the server died
            // since the last call): once more, on a fresh server.
            Err(Attempt::Closed(why)) => {
                self.audit(
                    name,
                    crate::audit::Action::McpServerRestarted,
                    &format!("the connection was closed ({why}); starting the server again"),
                );
                match self.call_once(name, server, tool, arguments).await {
                    Ok(result) => Ok(result),
                    Err(Attempt::Closed(e) | Attempt::Failed(e)) => Err(McpError::Failed(e)),
                }
            }
            Err(Attempt::Failed(e)) => Err(McpError::Failed(e)),
            Ok(result) => Ok(result),
        }
    }

    async fn call_once(
        &self,
        name: &str,
        server: &McpServer,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, Attempt> {
        let client = self
            .client(name, server)
            .await
            .map_err(|e| Attempt::Failed(e.to_string()))?;
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let timeout = Duration::from_secs(server.call_timeout_secs);
        match tokio::time::timeout(timeout, client.call_tool(params)).await {
            Ok(Ok(mut result)) => {
                // Servers on older protocol versions leave it out; newer
                // clients of the gateway require it.
                result.result_type = Some(ResultType::COMPLETE);
                Ok(result)
            }
            Err(_) => {
                let message = format!(
                    "MCP server `{name}` did not answer `{tool}` within {timeout:?} (mcp_servers.{name}.call_timeout_secs)"
                );
                self.audit(name, crate::audit::Action::McpCallTimeout, &message);
                if server.container.is_some() {
                    // A hung server would hold every later call: replace it.
                    self.drop_client(name, &client).await;
                }
                Err(Attempt::Failed(message))
            }
            Ok(Err(e)) => {
                let closed = matches!(
                    e,
                    rmcp::ServiceError::TransportClosed | rmcp::ServiceError::TransportSend(_)
                );
                if closed || client.is_closed() {
                    self.drop_client(name, &client).await;
                }
                let message = format!("MCP server `{name}` failed on `{tool}`: {e}");
                Err(if closed {
                    Attempt::Closed(message)
                } else {
                    Attempt::Failed(message)
                })
            }
        }
    }

    async fn connect(&self, name: &str, server: &McpServer) -> Result<Client, McpError> {
        if server.container.is_some() {
            let attached = self
                .containers
                .start(&self.config, name)
                .await
                .map_err(|e| format!("MCP server `{name}`: {e}"))?;
            self.audit(
                name,
                crate::audit::Action::McpServerStarted,
                &format!(
                    "container {}",
                    &attached.container_id[..12.min(attached.container_id.len())]
                ),
            );
            return ().serve((attached.output, attached.input)).await.map_err(|e| {
                McpError::Failed(format!("MCP server `{name}`: handshake failed: {e}"))
            });
        }
        connect(name, server).await
    }
}

async fn connect(name: &str, server: &McpServer) -> Result<Client, McpError> {
    if let Some(command) = &server.command {
        let Some((program, args)) = command.split_first() else {
            return Err(McpError::Failed(format!(
                "MCP server `{name}`: `command` is empty"
            )));
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).env_clear();
        for key in PASSED_ENV {
            if let Ok(value) = std::env::var(key) {
                cmd.env(key, value);
            }
        }
        cmd.envs(&server.env);
        let (process, stderr) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("MCP server `{name}`: cannot start `{program}`: {e}"))?;
        if let Some(stderr) = stderr {
            let server_name = name.to_string();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(server = %server_name, "{line}");
                }
            });
        }
        return ()
            .serve(process)
            .await
            .map_err(|e| McpError::Failed(format!("MCP server `{name}`: handshake failed: {e}")));
    }
    if let Some(url) = &server.url {
        let http = crate::gateway::llm::default_client()
            .map_err(|e| format!("MCP server `{name}`: {e}"))?;
        let transport = StreamableHttpClientTransport::with_client(
            http,
            StreamableHttpClientTransportConfig::with_uri(url.clone()),
        );
        return ().serve(transport).await.map_err(|e| {
            McpError::Failed(format!(
                "MCP server `{name}` ({url}): handshake failed: {e}"
            ))
        });
    }
    Err(McpError::Failed(format!(
        "MCP server `{name}` has none of `command`, `url` or `container`"
    )))
}
