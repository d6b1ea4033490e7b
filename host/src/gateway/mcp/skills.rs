//! WASM skills offered as MCP tools. The plugin host is created on first use
//! and each skill is loaded once (with its `plugins.config.<name>`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolResult, JsonObject, Tool};
use tokio::sync::{Mutex, OnceCell};

use super::text_result;
use crate::config::Config;
use crate::plugins::api::ToolError;
use crate::plugins::{CallLimits, Catalog, HostPaths, LoadedPlugin, PluginHost};

pub struct Skills {
    home: PathBuf,
    dirs: Vec<PathBuf>,
    config: BTreeMap<String, serde_json::Value>,
    limits: CallLimits,
    host: OnceCell<Arc<PluginHost>>,
    loaded: Mutex<BTreeMap<String, Arc<LoadedPlugin>>>,
}

impl Skills {
    pub fn new(config: &Config, home: &Path) -> Self {
        let limits = &config.plugins.limits;
        Self {
            home: home.to_path_buf(),
            dirs: config.plugins.dirs.clone(),
            config: config.plugins.config.clone(),
            limits: CallLimits {
                memory_bytes: (limits.memory_mb as usize) << 20,
                timeout: Duration::from_millis(limits.call_timeout_ms),
            },
            host: OnceCell::new(),
            loaded: Mutex::new(BTreeMap::new()),
        }
    }

    async fn host(&self) -> Result<Arc<PluginHost>, String> {
        self.host
            .get_or_try_init(|| async {
                let paths = HostPaths::under(&self.home);
                tokio::task::spawn_blocking(move || PluginHost::new(paths))
                    .await
                    .map_err(|e| e.to_string())?
                    .map(Arc::new)
                    .map_err(|e| format!("cannot start the plugin host: {e:#}"))
            })
            .await
            .cloned()
    }

    async fn plugin(&self, name: &str) -> Result<(Arc<PluginHost>, Arc<LoadedPlugin>), String> {
        let host = self.host().await?;
        let mut loaded = self.loaded.lock().await;
        if let Some(plugin) = loaded.get(name) {
            return Ok((host, plugin.clone()));
        }
        let (home, dirs, limits) = (self.home.clone(), self.dirs.clone(), self.limits);
        let config = self
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

    pub async fn tools(&self, name: &str) -> Result<Vec<Tool>, String> {
        let (host, plugin) = self.plugin(name).await?;
        let specs = host
            .skill_tools(&plugin)
            .await
            .map_err(|e| format!("skill `{name}`: {e}"))?;
        Ok(specs
            .into_iter()
            .map(|spec| {
                let schema =
                    serde_json::from_str::<JsonObject>(&spec.input_schema).unwrap_or_else(|_| {
                        let mut object = JsonObject::new();
                        object.insert("type".into(), "object".into());
                        object
                    });
                Tool::new(spec.name, spec.description, schema)
            })
            .collect())
    }

    pub async fn invoke(
        &self,
        name: &str,
        tool: &str,
        args_json: &str,
    ) -> Result<CallToolResult, String> {
        let (host, plugin) = self.plugin(name).await?;
        match host.skill_invoke(&plugin, tool, args_json).await {
            Ok(Ok(output)) => Ok(text_result(output.json, false)),
            Ok(Err(e)) => Ok(text_result(describe(&e), true)),
            Err(e) => Err(format!("skill `{name}`: {e}")),
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
