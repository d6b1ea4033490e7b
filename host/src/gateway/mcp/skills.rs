//! WASM skills offered as MCP tools. The plugin host is created on first use
//! and each skill is loaded once (with its `plugins.config.<name>`), then
//! bound to each calling workspace's own state (kv, `/data`) and HTTP grant:
//! a workspace's calls never see another's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolResult, JsonObject, Tool};
use tokio::sync::{Mutex, OnceCell};

use super::McpError;
use super::text_result;
use crate::audit::AuditLog;
use crate::config::Config;
use crate::plugins::api::ToolError;
use crate::plugins::{
    CallLimits, Catalog, HostPaths, LoadedPlugin, PluginHost, Scope, plugin_http_reach,
};

pub struct Skills {
    home: PathBuf,
    audit: Arc<AuditLog>,
    config: Arc<Config>,
    limits: CallLimits,
    host: OnceCell<Arc<PluginHost>>,
    /// By plugin name, in no workspace's scope (compiled once).
    loaded: Mutex<BTreeMap<String, Arc<LoadedPlugin>>>,
    /// By (workspace, plugin name).
    scoped: Mutex<BTreeMap<(String, String), Arc<LoadedPlugin>>>,
}

impl Skills {
    /// `host`: the process's plugin host; `None` starts one (recording to
    /// `audit`) on first use.
    pub fn new(
        config: &Config,
        home: &Path,
        host: Option<Arc<PluginHost>>,
        audit: Arc<AuditLog>,
    ) -> Self {
        let limits = &config.plugins.limits;
        Self {
            home: home.to_path_buf(),
            audit,
            config: Arc::new(config.clone()),
            limits: CallLimits {
                memory_bytes: (limits.memory_mb as usize) << 20,
                timeout: Duration::from_millis(limits.call_timeout_ms),
                data_quota_bytes: limits.data_quota_mb << 20,
            },
            host: OnceCell::new_with(host),
            loaded: Mutex::new(BTreeMap::new()),
            scoped: Mutex::new(BTreeMap::new()),
        }
    }

    async fn host(&self) -> Result<Arc<PluginHost>, McpError> {
        self.host
            .get_or_try_init(|| async {
                let state = self.config.state.location(&self.home)?;
                let paths = HostPaths::with_state(&self.home, state);
                let legacy = self.config.plugins.legacy_secrets;
                let audit = self.audit.clone();
                tokio::task::spawn_blocking(move || PluginHost::new(paths, audit))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(|host| Arc::new(host.with_legacy_secrets(legacy)))
                    .map_err(|e| format!("cannot start the plugin host: {e:#}"))
            })
            .await
            .cloned()
            .map_err(McpError::Failed)
    }

    /// `name` bound to `workspace`'s state and HTTP grant.
    async fn plugin(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<(Arc<PluginHost>, Arc<LoadedPlugin>), McpError> {
        let key = (workspace.to_string(), name.to_string());
        if let Some(plugin) = self.scoped.lock().await.get(&key) {
            return Ok((self.host().await?, plugin.clone()));
        }
        let (host, template) = self.template(name).await?;
        let reach = plugin_http_reach(&self.config, workspace, name, &template.manifest);
        let plugin = host
            .rescope(&template, &Scope::workspace(workspace), reach)
            .map_err(|e| format!("skill `{name}`: {e}"))?;
        let mut scoped = self.scoped.lock().await;
        let plugin = scoped.entry(key).or_insert(plugin).clone();
        Ok((host, plugin))
    }

    async fn template(&self, name: &str) -> Result<(Arc<PluginHost>, Arc<LoadedPlugin>), McpError> {
        let host = self.host().await?;
        let mut loaded = self.loaded.lock().await;
        if let Some(plugin) = loaded.get(name) {
            return Ok((host, plugin.clone()));
        }
        let (home, dirs, limits) = (
            self.home.clone(),
            self.config.plugins.dirs.clone(),
            self.limits,
        );
        let config = self
            .config
            .plugins
            .config
            .get(name)
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        let (task_host, task_name) = (host.clone(), name.to_string());
        let plugin = tokio::task::spawn_blocking(move || {
            let catalog = Catalog::discover(&home, &dirs);
            let package = catalog.get(&task_name).map_err(|e| e.to_string())?;
            task_host
                .load(package, Some(&config), limits)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("skill `{name}`: {e}"))?;
        loaded.insert(name.to_string(), plugin.clone());
        Ok((host, plugin))
    }

    pub async fn tools(&self, workspace: &str, name: &str) -> Result<Vec<Tool>, McpError> {
        let (host, plugin) = self.plugin(workspace, name).await?;
        let specs = host
            .skill_tools(&plugin)
            .await
            .map_err(|e| format!("skill `{name}`: {e}"))?;
        let reads: std::collections::BTreeSet<&str> = plugin.manifest.read_tools().collect();
        Ok(specs
            .into_iter()
            .map(|spec| {
                let schema =
                    serde_json::from_str::<JsonObject>(&spec.input_schema).unwrap_or_else(|_| {
                        let mut object = JsonObject::new();
                        object.insert("type".into(), "object".into());
                        object
                    });
                // What the manifest says, as MCP annotations; whether it is
                // believed is the operator's (`skills.NAME.trust_effects`).
                let read = reads.contains(spec.name.as_str());
                let mut annotations = rmcp::model::ToolAnnotations::new();
                annotations.read_only_hint = Some(read);
                annotations.destructive_hint = Some(!read);
                Tool::new(spec.name, spec.description, schema).annotate(annotations)
            })
            .collect())
    }

    pub async fn invoke(
        &self,
        workspace: &str,
        name: &str,
        tool: &str,
        args_json: &str,
    ) -> Result<CallToolResult, McpError> {
        let (host, plugin) = self.plugin(workspace, name).await?;
        match host.skill_invoke(&plugin, tool, args_json).await {
            Ok(Ok(output)) => Ok(text_result(output.json, false)),
            Ok(Err(e)) => Ok(text_result(describe(&e), true)),
            Err(e) => Err(McpError::Failed(format!("skill `{name}`: {e}"))),
        }
    }
}

fn describe(error: &ToolError) -> String {
    match error {
        ToolError::UnknownTool(m) => format!("unknown tool: {m}"),
        ToolError::InvalidArgs(m) => format!("invalid arguments: {m}"),
        ToolError::Failed(m) => format!("failed: {m}"),
        ToolError::Denied(m) => format!("denied: {m}"),
    }
}
