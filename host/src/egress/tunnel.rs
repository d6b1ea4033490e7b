//! Tunnels: a container asks the proxy for `http://SERVICE.tunnel/PATH`
//! and the proxy hands the request to the `forward` of the tunnel plugin
//! serving SERVICE; it never opens a socket for it itself. The plugin
//! reaches the service under its own HTTP grant (its manifest, and the
//! loopback address its configuration names).
//!
//! One plugin may serve several services: `plugins.config.NAME` is then a
//! list, one configuration (with its own `service`) per instance.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::Config;
use crate::plugins::api::{HttpRequest, HttpResponse, TunnelError};
use crate::plugins::{CallLimits, Catalog, LoadedPlugin, PluginHost, PluginKind, Scope};

/// One loaded instance serving one service.
struct Served {
    plugin: Arc<LoadedPlugin>,
}

/// The tunnel plugins this process serves, by service.
#[derive(Default)]
pub struct Tunnels {
    host: Option<Arc<PluginHost>>,
    by_service: BTreeMap<String, Served>,
}

/// Why a tunnel did not answer: the status the container gets and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub why: String,
}

impl Tunnels {
    /// Loads, from `catalog`, every configured instance of a tunnel plugin
    /// whose service a workspace lists, and asks each which service it
    /// serves. What cannot be served is returned, one line each; the
    /// proxy answers requests for it 502.
    pub async fn load(
        host: Arc<PluginHost>,
        catalog: &Catalog,
        config: &Config,
        limits: CallLimits,
    ) -> (Self, Vec<String>) {
        let mut tunnels = Tunnels {
            host: Some(host.clone()),
            by_service: BTreeMap::new(),
        };
        let mut problems = Vec::new();
        let listed: Vec<&String> = config
            .workspaces
            .values()
            .flat_map(|ws| &ws.tunnels)
            .collect();
        for (service, plugin) in config.plugins.configured_services() {
            if !listed.iter().any(|l| *l == service) || tunnels.by_service.contains_key(service) {
                continue;
            }
            match load_one(&host, catalog, config, limits, plugin, service).await {
                Ok(loaded) => {
                    tunnels
                        .by_service
                        .insert(service.to_owned(), Served { plugin: loaded });
                }
                Err(why) => problems.push(format!("tunnel `{service}`: {why}")),
            }
        }
        (tunnels, problems)
    }

    /// The plugin serving `service`, if one is loaded.
    pub fn plugin_of(&self, service: &str) -> Option<&str> {
        self.by_service.get(service).map(|s| s.plugin.name())
    }

    /// Hands `request` (a relative URL) to the plugin serving `service`.
    pub async fn forward(
        &self,
        service: &str,
        request: &HttpRequest,
    ) -> Result<HttpResponse, Refusal> {
        let (Some(host), Some(served)) = (&self.host, self.by_service.get(service)) else {
            return Err(Refusal {
                status: 502,
                why: format!(
                    "no tunnel plugin serves `{service}` in this process (see `pincer config check` and the log)"
                ),
            });
        };
        let name = served.plugin.name();
        match host.tunnel_forward(&served.plugin, request).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(TunnelError::Denied(why))) => Err(Refusal {
                status: 403,
                why: format!("tunnel {name} refused: {why}"),
            }),
            Ok(Err(TunnelError::BadRequest(why))) => Err(Refusal {
                status: 400,
                why: format!("tunnel {name}: {why}"),
            }),
            Ok(Err(TunnelError::Upstream(why))) => Err(Refusal {
                status: 502,
                why: format!("tunnel {name}: {why}"),
            }),
            Err(e) => Err(Refusal {
                status: 502,
                why: format!("tunnel {name} failed: {e}"),
            }),
        }
    }
}

async fn load_one(
    host: &PluginHost,
    catalog: &Catalog,
    config: &Config,
    limits: CallLimits,
    plugin: &str,
    service: &str,
) -> Result<Arc<LoadedPlugin>, String> {
    let package = catalog.get(plugin).map_err(|e| e.to_string())?;
    let manifest = crate::plugins::Manifest::parse(&package.manifest_text, plugin)
        .map_err(|e| e.to_string())?;
    if manifest.kind() != PluginKind::Tunnel {
        return Err(format!(
            "plugins.config.{plugin} names it, but {plugin} is a {} plugin, not a tunnel",
            manifest.kind()
        ));
    }
    let instance = config
        .plugins
        .instances(plugin)
        .into_iter()
        .find(|v| v.get("service").and_then(serde_json::Value::as_str) == Some(service))
        .cloned()
        .unwrap_or_default();
    let reach = crate::plugins::plugin_http_reach(
        config,
        crate::plugins::LEGACY_WORKSPACE,
        plugin,
        &manifest,
    );
    let loaded = host
        .load_in(
            package,
            Some(&instance),
            limits,
            &Scope::default(),
            Some(reach),
        )
        .map_err(|e| e.to_string())?;
    let reported = host
        .tunnel_service(&loaded)
        .await
        .map_err(|e| e.to_string())?;
    if reported != service {
        return Err(format!(
            "{plugin} reports serving `{reported}`, not the configured `{service}`"
        ));
    }
    Ok(loaded)
}
